"""The Python examples of docs/API.md ("Python client library") run as written."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.service.conftest import Server

ROOT = Path(__file__).resolve().parents[3]


def test_api_doc_python_examples(
    make_server: Callable[..., Server],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = (ROOT / "docs" / "API.md").read_text()
    section = text[text.index("## Python client library") :]
    sync, asynchronous, many, async_many = re.findall(r"```python\n(.*?)```", section, re.S)[:4]
    srv = make_server()  # its own server: the example rotates `default`
    monkeypatch.setenv("SEALFLOW_URL", srv.url)
    monkeypatch.setenv("SEALFLOW_TOKEN", srv.token)
    monkeypatch.chdir(tmp_path)
    report = os.urandom(3 << 20)
    (tmp_path / "report.pdf").write_bytes(report)
    scope: dict[str, object] = {}
    exec(compile(sync, "API.md", "exec"), scope)  # noqa: S102 (our own documentation)
    assert scope["plain"] == report
    assert (tmp_path / "report.pdf.sfl").read_bytes()[:4] == b"SFL1"
    assert capsys.readouterr().out.startswith("400 decryption_failed\n2 [datetime.datetime(")
    exec(compile(asynchronous, "API.md", "exec"), {})  # noqa: S102
    assert capsys.readouterr().out == "b'a'\n"
    exec(compile(many, "API.md", "exec"), {})  # noqa: S102
    assert capsys.readouterr().out == "7\nDecryptionFailed b'row 8'\n"
    exec(compile(async_many, "API.md", "exec"), {})  # noqa: S102
    assert capsys.readouterr().out == "1000\n"
