"""What a person sees of the command itself: help, bad settings, pipes, what it loads."""

from __future__ import annotations

import argparse
import base64
import os
import re
import subprocess
import sys
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest

from sealflow.service import cli
from sealflow.service.config import Settings
from tests.service.cli.test_cli import run


@pytest.mark.parametrize(
    ("command", "env"),
    [
        (["selftest"], {"SEALFLOW_PROVIDER": "bogus"}),
        (["selftest"], {"SEALFLOW_CONTEXT_STRATEGY": "bogus"}),
        (["serve"], {"SEALFLOW_CONTEXT_STRATEGY": "bogus"}),
        (["serve"], {"SEALFLOW_PORT": "eighty"}),
        (["serve", "--tls-cert", "cert.pem"], {}),
        (["keys", "list"], {"SEALFLOW_PROVIDER": "bogus"}),
        (["tokens", "list", "--data-dir", ""], {"SEALFLOW_MAX_SINGLE_BYTES": "-1"}),
    ],
)
def test_a_bad_setting_is_one_line_and_exit_2_like_a_bad_flag(
    tmp_path: Path, command: list[str], env: dict[str, str]
) -> None:
    done = run(*command, cwd=tmp_path, **env)
    stderr = done.stderr.decode()
    assert done.returncode == 2, stderr
    assert stderr.startswith("sealflow: invalid setting --"), stderr
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert "Traceback" not in stderr
    assert not (tmp_path / ".sealflow").exists()  # refused before anything was created
    # As argparse does for a bad flag value:
    bad_flag = run("serve", "--context-strategy", "bogus", cwd=tmp_path)
    assert bad_flag.returncode == 2


def test_help_works_whatever_the_environment_says() -> None:
    done = run("--help", SEALFLOW_PROVIDER="bogus", SEALFLOW_CONTEXT_STRATEGY="bogus")
    assert done.returncode == 0
    assert done.stderr == b""


@pytest.mark.parametrize(
    "command",
    [
        [],
        ["serve"],
        ["keys", "create"],
        ["tokens", "create"],
        ["approle", "role", "create"],
        ["approle", "secret-id", "create"],
        ["cert", "role", "create"],
        ["selftest"],
        ["healthcheck"],
        ["audit", "verify"],
        ["audit", "hmac"],
        ["migrate", "from-transit"],
        ["keystore", "backup"],
        ["keystore", "restore"],
        ["keystore", "init-master"],
        ["keystore", "rotate-master"],
    ],
)
def test_help_reads_as_words(command: list[str]) -> None:
    _reads_as_words(run(*command, "--help").stdout.decode())


def _reads_as_words(text: str) -> None:
    assert "usage: sealflow" in text
    assert "``" not in text  # no reStructuredText
    assert "default None" not in text
    # Flags and variables, never pydantic field names (data_dir, TLS_CERT, ...).
    words = set(re.findall(r"[A-Za-z][A-Za-z0-9_]*", text))
    fields = {w for w in words if "_" in w and not w.startswith("SEALFLOW_")}
    assert fields - _choices() == set(), fields
    assert not fields & set(Settings.model_fields)


def test_serve_help_lists_the_master_key_providers_and_their_settings() -> None:
    text = " ".join(run("serve", "--help").stdout.decode().split())
    assert "--master-key-provider {file,env,pkcs11,transit}" in text
    for name in ("library", "token_label", "key_label", "pin_file"):
        flag = "--master-key-pkcs11-" + name.replace("_", "-")
        assert flag in text
        assert f"SEALFLOW_MASTER_KEY_PKCS11_{name.upper()}" in text


def _choices() -> set[str]:
    """The values a setting may take (``best_effort``): words a user types, not field names."""
    return {
        value
        for field in Settings.model_fields.values()
        if typing.get_origin(field.annotation) is typing.Literal
        for value in typing.get_args(field.annotation)
    }


def test_a_closed_pipe_ends_quietly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEALFLOW_MASTER_KEY", base64.b64encode(os.urandom(32)).decode())
    # `sealflow keys rotate k | head -0`: the reader is gone before the command writes.
    assert run("keys", "create", "k", "--data-dir", str(tmp_path)).returncode == 0
    read, write = os.pipe()
    os.close(read)
    proc = subprocess.run(  # noqa: S603
        [sys.executable, "-m", "sealflow", "keys", "rotate", "k", "--data-dir", str(tmp_path)],
        stdout=write,
        stderr=subprocess.PIPE,
        timeout=120,
        check=False,
    )
    os.close(write)
    assert proc.stderr == b""
    assert proc.returncode == 141  # 128 + SIGPIPE, as a shell reports a tool killed by it
    # The rotation itself happened: the pipe only lost its output.
    shown = run("keys", "show", "k", "--json", "--data-dir", str(tmp_path)).stdout.decode()
    assert '"latest": 2' in shown


def test_keys_tokens_audit_encrypt_decrypt_load_no_server_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SEALFLOW_MASTER_KEY", base64.b64encode(os.urandom(32)).decode())
    code = (
        "import sys\n"
        "from sealflow.service.cli import main\n"
        f"main(['keys', 'create', 'k', '--data-dir', {str(tmp_path)!r}])\n"
        f"main(['tokens', 'list', '--data-dir', {str(tmp_path)!r}])\n"
        f"main(['audit', 'hmac', 'x', '--data-dir', {str(tmp_path)!r}])\n"
        "loaded = [m for m in sys.modules if m.split('.')[0] in ('uvicorn', 'fastapi')"
        " or m.startswith('sealflow.service.server')]\n"
        "print(loaded)\n"
    )
    done = subprocess.run(  # noqa: S603
        [sys.executable, "-c", code], capture_output=True, timeout=120, check=True
    )
    assert done.stdout.decode().strip().splitlines()[-1] == "[]"


def test_selftest_verbose_prints_what_the_calibration_measured_and_chose() -> None:
    done = run("selftest", "--verbose", "--crypto-threads", "1")
    text = done.stdout.decode()
    assert done.returncode == 0, done.stderr
    assert "self-test passed" in text
    assert "calibration for 1 job(s) at once" in text
    lines = [line for line in text.splitlines() if line.startswith("  ")]
    assert len(lines) == 3 * 5  # algorithm x size class
    assert "aes-256-gcm chunks: native " in text
    assert all(", cryptography " in line and "(by single)" in line for line in lines)
    forced = run("selftest", "--verbose", SEALFLOW_PROVIDER="native").stdout.decode()
    assert "calibration: none (a provider was forced)" in forced
    assert "aes-256-gcm: small=native, large=native, chunks=native" in forced


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, (*path, name))


def test_every_option_of_every_command_has_help() -> None:
    commands = list(_commands(cli.parser()))
    assert len(commands) > 40  # the walk found the subcommands
    missing = [
        f"sealflow {' '.join(path)} {action.option_strings[-1]}"
        for path, parser in commands
        for action in parser._actions
        if action.option_strings and not (action.help and action.help.strip())
    ]
    assert missing == []


def test_every_commands_help_reads_as_words() -> None:
    """In-process, for every command and subcommand (the list above runs a few whole)."""
    for _, parser in _commands(cli.parser()):
        _reads_as_words(parser.format_help())
