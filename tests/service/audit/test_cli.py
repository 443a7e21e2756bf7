"""``sealflow audit verify`` and ``sealflow audit hmac``, run as the commands they are."""

from __future__ import annotations

import base64
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from sealflow.service.audit import Auditor, FileSink, hmac_field, writer_id
from sealflow.service.keystore import SQLiteKeyStore
from tests.service.cli.test_cli import run
from tests.service.conftest import SEALFLOW

from .records import MASTER, REQUEST
from .trail import CASES, KEY, Expected, Trail, make_trail


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """A data dir whose master key file holds MASTER, and its keystore."""
    folder = tmp_path / "data"
    folder.mkdir(mode=0o700)
    key_file = folder / "master.key"
    key_file.write_text(base64.b64encode(MASTER).decode() + "\n")
    key_file.chmod(0o600)
    SQLiteKeyStore(folder / "keystore.db", MASTER).close()
    return folder


def verify_cli(data: Path, files: list[Path], *flags: str) -> subprocess.CompletedProcess[str]:
    # Given newest first, as a careless glob or `ls -t` would: the command orders them.
    names = [str(f) for f in reversed(files)]
    done = run("audit", "verify", "--data-dir", str(data), *flags, *names)
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(), done.stderr.decode()
    )


def test_an_untouched_trail_verifies_and_says_how_much_and_when(data: Path) -> None:
    trail = make_trail(data.parent / "audit")
    for flags in ([], ["--strict"]):
        done = verify_cli(data, trail.files, *flags)
        assert (done.returncode, done.stderr) == (0, "")
        times = sorted(x.record["time"] for x in trail.lines)
        assert done.stdout == f"ok: {len(trail.lines)} records, {times[0]}..{times[-1]}\n"


@pytest.mark.parametrize("tamper", CASES, ids=[case.__name__ for case in CASES])
def test_each_tampering_fails_naming_the_first_bad_record(
    data: Path, tamper: Callable[[Trail], Expected]
) -> None:
    trail = make_trail(data.parent / "audit")
    path, line, words = tamper(trail)
    done = verify_cli(data, trail.files)
    assert done.returncode == 1, done.stdout
    assert done.stdout == ""
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith(f"error: {path}:{line}: "), (error, path, line)
    assert words in error


def test_an_unsealed_tail_is_a_warning_and_with_strict_an_error(data: Path) -> None:
    live = data.parent / "audit.log"
    sealed = Auditor(KEY, [FileSink(live, 0)], writer_id(), "required")
    sealed.record(REQUEST)
    assert sealed.close()
    crashed = Auditor(KEY, [FileSink(live, 0)], writer_id(), "required", 2, 1e9)
    for _ in range(3):  # a checkpoint after the second, then one unsealed: then "killed"
        crashed.record(REQUEST)
    assert crashed.flush()
    tail = f"{live}:6: unsealed tail: writer {crashed.writer}'s last 1 record(s), to {live}:6"
    done = verify_cli(data, [live])
    assert done.returncode == 0
    assert done.stdout.startswith("ok: 6 records, ")
    assert done.stderr.startswith(f"warning: {tail}")
    strict = verify_cli(data, [live], "--strict")
    assert (strict.returncode, strict.stdout) == (1, "")
    assert strict.stderr.startswith(f"error: {tail}")


def test_verify_refuses_another_master_key_and_a_missing_keystore(
    data: Path, tmp_path: Path
) -> None:
    trail = make_trail(tmp_path / "audit")
    other = base64.b64encode(os.urandom(32)).decode()
    done = run(
        "audit", "verify", "--data-dir", str(data), str(trail.live), SEALFLOW_MASTER_KEY=other
    )
    assert done.returncode == 1
    assert b"master key does not open keystore" in done.stderr
    nowhere = tmp_path / "nowhere"
    done = run("audit", "verify", "--data-dir", str(nowhere), str(trail.live))
    assert done.returncode == 1
    assert b"no keystore at" in done.stderr
    assert not nowhere.exists()  # not made, as `sealflow keys` would


def test_files_written_under_another_master_key_fail_at_their_first_checkpoint(
    data: Path, tmp_path: Path
) -> None:
    from sealflow.service.audit import audit_key

    live = tmp_path / "audit.log"
    a = Auditor(audit_key(os.urandom(32)), [FileSink(live, 0)], writer_id(), "required")
    a.record(REQUEST)
    assert a.close()
    done = verify_cli(data, [live])
    assert done.returncode == 1
    assert f"error: {live}:2: the checkpoint's hmac does not verify" in done.stderr
    assert "not the master key" in done.stderr


def test_hmac_prints_the_field_a_record_holds_for_a_value(data: Path) -> None:
    done = run("audit", "hmac", "--data-dir", str(data), "my aad")
    assert done.returncode == 0
    assert done.stdout.decode() == hmac_field(KEY, "my aad") + "\n"
    # A token is better read from standard input than given in ps's view.
    piped = subprocess.run(  # noqa: S603
        [SEALFLOW, "audit", "hmac", "--data-dir", str(data), "-"],
        input=b"s.secret-token\n",
        capture_output=True,
        check=True,
    )
    assert piped.stdout.decode() == hmac_field(KEY, "s.secret-token") + "\n"
    other = base64.b64encode(os.urandom(32)).decode()
    wrong = run("audit", "hmac", "--data-dir", str(data), "x", SEALFLOW_MASTER_KEY=other)
    assert (wrong.returncode, wrong.stdout) == (1, b"")
