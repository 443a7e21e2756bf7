"""The curl examples in README.md and docs/API.md work as written (run against a test server)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from .conftest import Server

ROOT = Path(__file__).resolve().parents[2]


def shell_block_after(doc: Path, marker: str) -> str:
    text = doc.read_text()
    block = re.search(r"```sh\n(.*?)```", text[text.index(marker) :], re.S)
    assert block is not None
    return block.group(1)


def run_example(server: Server, script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert shutil.which("curl"), "curl is needed (.ci/run installs it)"
    script = script.replace("http://127.0.0.1:8080", server.url)
    script = re.sub(r"^export TOKEN=.*$", "", script, flags=re.M)  # set below instead
    env = {**os.environ, "TOKEN": server.token}
    return subprocess.run(  # noqa: S603
        ["bash", "-euo", "pipefail", "-c", script],  # noqa: S607
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_readme_curl_example(server: Server, tmp_path: Path) -> None:
    script = shell_block_after(ROOT / "README.md", "Then, in another shell")
    assert "curl" in script
    done = run_example(server, script, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "attack at dawn\n"
    assert (tmp_path / "secret.sfl").read_bytes()[:4] == b"SFL1"


def test_api_doc_curl_example(server: Server, tmp_path: Path) -> None:
    script = shell_block_after(ROOT / "docs" / "API.md", "## curl")
    report, big = os.urandom(100_000), os.urandom(5 << 20)
    (tmp_path / "report.pdf").write_bytes(report)
    (tmp_path / "big.iso").write_bytes(big)
    done = run_example(server, script, tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "report.pdf.out").read_bytes() == report
    assert (tmp_path / "big.iso.sfl").read_bytes()[:4] == b"SFL1"
