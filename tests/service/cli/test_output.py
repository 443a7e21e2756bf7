"""Where ``sealflow encrypt -o`` writes, run as a user runs it (a subprocess, a real server).

A regular file is replaced only on success; a FIFO or a character device is written in place
and stays what it was (run as root, ``-o /dev/null`` used to replace /dev/null with a regular
file); a symbolic link is refused; an envelope goes to a terminal only with ``-o -``. The
device nodes are the test's own (``os.mknod`` in its temporary folder: the tests run as root),
never the system's.
"""

from __future__ import annotations

import os
import select
import stat
import subprocess
import threading
import time
import tty
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.service.conftest import SEALFLOW, Server

NULL, FULL = os.makedev(1, 3), os.makedev(1, 7)  # Linux's /dev/null and /dev/full


def sealflow(
    server: Server, *args: str, stdin: bytes = b"", stdout: int = subprocess.PIPE
) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "SEALFLOW_URL": server.url, "SEALFLOW_TOKEN": server.token}
    return subprocess.run(  # noqa: S603
        [SEALFLOW, *args], input=stdin, stdout=stdout, stderr=subprocess.PIPE, env=env,
        timeout=120, check=False,
    )  # fmt: skip


def opened(server: Server, envelope: bytes) -> bytes:
    with server.client() as c:
        answer = c.post("/v1/decrypt", content=envelope)
        answer.raise_for_status()
        return answer.content


def test_a_regular_file_is_replaced_whole(server: Server, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.write_bytes(b"the previous envelope")
    done = sealflow(server, "encrypt", "--key", "default", "-o", str(out), stdin=b"new")
    assert (done.returncode, done.stderr) == (0, b"")
    assert opened(server, out.read_bytes()) == b"new"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no temporary file left


def test_a_fifo_is_written_in_place(server: Server, tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    # A writer end of our own, so the reader's open returns at once and its read ends when
    # this end closes, whether or not the command ever opens the FIFO.
    keeper = os.open(fifo, os.O_RDWR)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    try:
        data = os.urandom(300_000)  # more than a pipe holds: written while it is read
        done = sealflow(server, "encrypt", "--key", "default", "-o", str(fifo), stdin=data)
    finally:
        os.close(keeper)
        reader.join(60)
    assert (done.returncode, done.stderr) == (0, b"")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert opened(server, got[0]) == data
    assert [p.name for p in tmp_path.iterdir()] == ["fifo"]


@pytest.fixture
def device(tmp_path: Path) -> Path:
    """The test's own /dev/null: a character device node in its temporary folder."""
    node = tmp_path / "null"
    os.mknod(node, stat.S_IFCHR | 0o666, NULL)
    return node


def test_a_character_device_is_written_in_place(
    server: Server, tmp_path: Path, device: Path
) -> None:
    done = sealflow(server, "encrypt", "--key", "default", "-o", str(device), stdin=b"x" * 5000)
    assert (done.returncode, done.stderr) == (0, b"")
    st = os.lstat(device)
    assert stat.S_ISCHR(st.st_mode)
    assert st.st_rdev == NULL
    assert [p.name for p in tmp_path.iterdir()] == ["null"]


def test_bytes_go_into_the_device_itself(server: Server, tmp_path: Path) -> None:
    # /dev/full refuses every write: the command's failure shows the bytes went there.
    node = tmp_path / "full"
    os.mknod(node, stat.S_IFCHR | 0o666, FULL)
    done = sealflow(server, "encrypt", "--key", "default", "-o", str(node), stdin=b"x")
    assert done.returncode == 1
    assert b"No space left on device" in done.stderr
    assert stat.S_ISCHR(os.lstat(node).st_mode)
    assert os.lstat(node).st_rdev == FULL
    assert [p.name for p in tmp_path.iterdir()] == ["full"]


@pytest.mark.parametrize("to", ["file", "missing", "device"])
def test_a_symbolic_link_is_refused(server: Server, tmp_path: Path, device: Path, to: str) -> None:
    target = {"file": tmp_path / "target", "missing": tmp_path / "missing", "device": device}[to]
    if to == "file":
        target.write_bytes(b"kept")
    link = tmp_path / "link"
    link.symlink_to(target)
    before = sorted(p.name for p in tmp_path.iterdir())
    done = sealflow(server, "encrypt", "--key", "default", "-o", str(link), stdin=b"x")
    assert done.returncode == 2
    err = done.stderr.decode()
    assert "is a symbolic link" in err
    assert repr(str(target)) in err
    assert done.stdout == b""
    assert link.is_symlink()
    assert os.readlink(link) == str(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing made or replaced
    if to == "file":
        assert target.read_bytes() == b"kept"
    if to == "device":
        assert stat.S_ISCHR(os.lstat(device).st_mode)


def test_a_file_swapped_for_a_link_during_the_transfer_is_left_alone(
    server: Server, tmp_path: Path
) -> None:
    out, target = tmp_path / "out", tmp_path / "target"
    out.write_bytes(b"old")
    target.write_bytes(b"kept")
    env = {**os.environ, "SEALFLOW_URL": server.url, "SEALFLOW_TOKEN": server.token}
    proc = subprocess.Popen(  # noqa: S603
        [SEALFLOW, "encrypt", "--key", "default", "-o", str(out)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )  # fmt: skip
    try:
        assert proc.stdin is not None
        proc.stdin.write(b"x" * 100_000)
        proc.stdin.flush()
        while not list(tmp_path.glob(".out.*.part")):  # the output is open: swap it now
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.01)
        out.unlink()
        out.symlink_to(target)
        _, err = proc.communicate(timeout=120)  # closes stdin: the input ends
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1
    assert b"is a symbolic link" in err
    assert b"changed during the transfer" in err
    assert out.is_symlink()
    assert target.read_bytes() == b"kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "target"]


def test_a_directory_is_refused(server: Server, tmp_path: Path) -> None:
    done = sealflow(server, "encrypt", "--key", "default", "-o", str(tmp_path), stdin=b"x")
    assert done.returncode == 2
    assert b"is a directory" in done.stderr.lower()  # refused before, in other words
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def terminal() -> Iterator[tuple[int, int]]:
    """A pseudo-terminal in raw mode (bytes pass unchanged): (its master, its terminal)."""
    master, slave = os.openpty()
    tty.setraw(slave)
    try:
        yield master, slave
    finally:
        os.close(master)
        os.close(slave)


def shown(master: int) -> bytes:
    """What reached the terminal (the command has exited: all of it is there)."""
    got = b""
    while select.select([master], [], [], 0)[0]:
        got += os.read(master, 1 << 16)
    return got


def test_an_envelope_goes_to_a_terminal_only_when_asked(
    server: Server, terminal: tuple[int, int]
) -> None:
    master, slave = terminal
    done = sealflow(server, "encrypt", "--key", "default", stdin=b"secret", stdout=slave)
    assert done.returncode == 2
    assert b"refusing to write the envelope to a terminal" in done.stderr
    assert b"-o -" in done.stderr
    assert shown(master) == b""
    by_name = sealflow(
        server, "encrypt", "--key", "default", "-o", os.ttyname(slave), stdin=b"secret"
    )
    assert by_name.returncode == 2
    assert b"refusing to write the envelope to a terminal" in by_name.stderr
    assert shown(master) == b""
    asked = sealflow(server, "encrypt", "--key", "default", "-o", "-", stdin=b"secret",
                     stdout=slave)  # fmt: skip
    assert (asked.returncode, asked.stderr) == (0, b"")
    assert opened(server, shown(master)) == b"secret"


def test_plaintext_goes_to_a_terminal(server: Server, terminal: tuple[int, int]) -> None:
    master, slave = terminal
    envelope = sealflow(server, "encrypt", "--key", "default", stdin=b"hello").stdout
    done = sealflow(server, "decrypt", stdin=envelope, stdout=slave)
    assert (done.returncode, done.stderr) == (0, b"")
    assert shown(master) == b"hello"
