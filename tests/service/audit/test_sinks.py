"""FileSink and StdoutSink on real files, processes and failures: a full tmpfs, a file made
read-only by a mount, a removed folder, a closed pipe, rotation shared by processes."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import pytest

from sealflow.service.audit import FileSink, audit_key, verify
from tests import tmpfs

from .records import MASTER, files_of, lines

KEY = audit_key(MASTER)


def numbered(start: int, stop: int, width: int = 40) -> list[bytes]:
    return [b"%d " % i + b"x" * (width - 2 - len(str(i))) for i in range(start, stop)]


def test_a_file_is_made_0600_and_batches_are_appended_whole(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    path.write_bytes(b"kept\n")
    path.chmod(0o600)
    path.unlink()  # made by the sink, with its own mode whatever the umask
    old = os.umask(0)
    try:
        sink = FileSink(path, 0)
    finally:
        os.umask(old)
    sink.write([b"a", b"b"])
    sink.write([])
    sink.write([b"c"])
    sink.close()
    assert path.read_bytes() == b"a\nb\nc\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = FileSink(path, 0)  # appends to what is there
    again.write([b"d"])
    again.close()
    assert path.read_bytes() == b"a\nb\nc\nd\n"


def test_a_missing_folder_fails_when_the_sink_is_made(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        FileSink(tmp_path / "none" / "audit.log", 0)
    assert not (tmp_path / "none").exists()


def test_rotation_keeps_every_file_under_the_size_and_the_lines_in_order(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    sink = FileSink(path, 200)
    want = numbered(0, 40)
    for i in range(0, 40, 3):
        sink.write(want[i : i + 3])
    sink.close()
    files = files_of(path)
    assert len(files) >= 40 * 41 // 200
    assert all(f.stat().st_size <= 200 for f in files)
    # Rotated files are read-only: how writers holding one learn that it was rotated.
    assert [stat.S_IMODE(f.stat().st_mode) for f in files] == [0o400] * (len(files) - 1) + [0o600]
    assert b"".join(f.read_bytes() for f in files).splitlines() == want


def test_a_batch_larger_than_the_size_is_written_whole_to_a_file_of_its_own(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.log"
    sink = FileSink(path, 100)
    sink.write(numbered(0, 1))
    sink.write(numbered(1, 6))  # 200 bytes
    sink.write(numbered(6, 7))
    sink.close()
    assert [len(f.read_bytes().splitlines()) for f in files_of(path)] == [1, 5, 1]


def test_a_rotated_name_sorts_after_every_rotated_file_there_even_a_later_one(
    tmp_path: Path,
) -> None:
    # A clock stepped back, or a second rotation in the same microsecond.
    path = tmp_path / "audit.log"
    future = tmp_path / "audit.log.29991231T235959.999999Z"
    future.write_bytes(b"")
    sink = FileSink(path, 50)
    for i in range(3):
        sink.write(numbered(i, i + 1))
    sink.close()
    rotated = files_of(path)[:-1]
    assert rotated[0] == future
    assert [f.name for f in rotated[1:]] == [
        "audit.log.30000101T000000.000000Z",
        "audit.log.30000101T000000.000001Z",
    ]


def test_a_rotation_by_another_writer_is_seen_before_the_next_write(tmp_path: Path) -> None:
    # Two sinks of one path are two open files, as two processes have: neither may write to
    # the file the other rotated away, nor rotate the other's new file again at once.
    path = tmp_path / "audit.log"
    sinks = [FileSink(path, 300), FileSink(path, 300)]
    want = numbered(0, 60)
    for i, line in enumerate(want):
        sinks[i % 2].write([line])
    for sink in sinks:
        sink.close()
    files = files_of(path)
    assert b"".join(f.read_bytes() for f in files).splitlines() == want
    assert all(f.stat().st_size == 280 for f in files[:-1])  # full: 7 lines of 40 bytes


WRITER = """
import sys
from pathlib import Path
from sealflow.service.audit import Auditor, FileSink, audit_key, writer_id
path, count = Path(sys.argv[1]), int(sys.argv[2])
auditor = Auditor(audit_key(bytes(range(32))), [FileSink(path, 4096)], writer_id(), "required",
                  checkpoint_every=7)
for i in range(count):
    auditor.record({"type": "change", "origin": "http", "operation": "key_rotate",
                    "key": "k", "version": i + 1})
    assert auditor.flush()
assert auditor.close()
"""


def test_processes_sharing_a_path_rotate_it_together_and_every_chain_verifies(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.log"
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path), "300"])  # noqa: S603
        for _ in range(3)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    files = files_of(path)
    written = lines(files)
    per_writer: dict[str, list[dict[str, Any]]] = {}
    for line in written:
        per_writer.setdefault(line.record["writer"], []).append(line.record)
    assert len(per_writer) == 3
    for records in per_writer.values():
        changes = [r["version"] for r in records if r["type"] == "change"]
        assert changes == list(range(1, 301))
    report = verify(files, KEY, strict=True)
    assert (report.ok, report.records) == (True, len(written))
    # Nobody wrote into a file another had rotated away, nor rotated a new file again at once.
    sizes = [f.stat().st_size for f in files]
    biggest_batch = 2 * max(len(line.raw) + 1 for line in written)  # a record, a checkpoint
    assert all(4096 - biggest_batch < s <= 4096 for s in sizes[:-1]), sizes
    assert len(files) > sum(sizes) // 4096


def fill(path: Path) -> None:
    """Write to ``path`` until the disk is full."""

    def forever(f: BinaryIO) -> None:
        while True:
            f.write(b"\0" * 4096)

    with path.open("wb", buffering=0) as f, pytest.raises(OSError, match="No space left"):
        forever(f)


def test_a_full_disk_fails_the_batch_and_leaves_only_whole_lines(tmp_path: Path) -> None:
    with tmpfs.mounted(tmp_path / "disk", 256 * 1024) as disk:
        path = disk / "audit.log"
        sink = FileSink(path, 0)
        sink.write(numbered(0, 10, 300))
        fill(disk / "filler")
        before = path.read_bytes()
        # Room is left in the file's last page: the next batch fits in part (a short write)
        # before the disk refuses the rest.
        assert len(before) % 4096 != 0
        for _ in range(2):
            with pytest.raises(OSError, match="No space left"):
                sink.write(numbered(10, 40, 300))
            assert path.read_bytes() == before  # the part that fitted was taken back
        (disk / "filler").unlink()
        sink.write(numbered(10, 40, 300))
        sink.close()
        assert path.read_bytes().splitlines() == numbered(0, 40, 300)


@contextlib.contextmanager
def read_only_over(target: Path, source: Path) -> Iterator[None]:
    """``source`` mounted read-only over the file ``target``: unwritable, even by root."""
    subprocess.run(["mount", "--bind", str(source), str(target)], check=True)  # noqa: S603, S607
    try:
        subprocess.run(  # noqa: S603
            ["mount", "-o", "remount,bind,ro", str(target)],  # noqa: S607
            check=True,
        )
        yield
    finally:
        subprocess.run(["umount", str(target)], check=True)  # noqa: S603, S607


def test_an_unwritable_file_fails_the_write_and_the_next_write_once_it_is_writable(
    tmp_path: Path,
) -> None:
    # Another writer (a CLI run as another user, say) rotates the file and starts a new
    # one this writer cannot open.
    path = tmp_path / "audit.log"
    ours, theirs = FileSink(path, 0), FileSink(path, 10)
    ours.write([b"1"])
    theirs.write([b"22222222"])  # past its 10 bytes: rotated first
    rotated, live = files_of(path)
    assert rotated.read_bytes() == b"1\n"
    other = tmp_path / "other"
    other.write_bytes(b"")
    with read_only_over(live, other):
        with pytest.raises(OSError, match="Read-only file system"):
            FileSink(path, 0)
        for _ in range(2):
            with pytest.raises(OSError, match="Read-only file system"):
                ours.write([b"3"])
    ours.write([b"3"])
    ours.close()
    theirs.close()
    assert [f.read_bytes() for f in files_of(path)] == [b"1\n", b"22222222\n3\n"]
    assert other.read_bytes() == b""


def test_a_path_replaced_by_hand_is_written_again_within_the_check_interval(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.log"
    sink = FileSink(path, 0)
    sink.write([b"1"])
    path.rename(tmp_path / "moved.log")
    path.write_bytes(b"")
    time.sleep(FileSink.CHECK_SECONDS * 1.5)
    sink.write([b"2"])
    sink.close()
    assert (tmp_path / "moved.log").read_bytes() == b"1\n"
    assert path.read_bytes() == b"2\n"


def test_a_removed_folder_fails_every_write_until_it_is_back(tmp_path: Path) -> None:
    folder = tmp_path / "audit"
    folder.mkdir()
    path = folder / "audit.log"
    sink = FileSink(path, 0)
    sink.write([b"1"])
    shutil.rmtree(folder)
    for _ in range(2):  # not written into the removed file, which no one could read
        with pytest.raises(FileNotFoundError):
            sink.write([b"2"])
    folder.mkdir()
    sink.write([b"2"])
    sink.close()
    assert path.read_bytes() == b"2\n"


STDOUT = """
import sys
from sealflow.service.audit import Auditor, StdoutSink, audit_key, writer_id
auditor = Auditor(audit_key(bytes(range(32))), [StdoutSink()], writer_id(), "required")
for i in range(50):
    auditor.record({"type": "change", "origin": "http", "operation": "key_create", "key": "k"})
    print(auditor.flush(), auditor.failing, file=sys.stderr)
print(auditor.close(), file=sys.stderr)
"""


def test_stdout_takes_the_lines_and_a_closed_pipe_is_a_failure(tmp_path: Path) -> None:
    out = tmp_path / "stdout"
    with out.open("wb") as f:
        done = subprocess.run(  # noqa: S603
            [sys.executable, "-c", STDOUT], stdout=f, stderr=subprocess.PIPE, check=True
        )
    assert done.stderr.decode().split() == ["True", "False"] * 50 + ["True"]
    written = lines([out])
    assert len(written) == 51
    assert verify([out], KEY, strict=True).ok
    read, write = os.pipe()
    os.close(read)
    done = subprocess.run(  # noqa: S603
        [sys.executable, "-c", STDOUT], stdout=write, stderr=subprocess.PIPE, check=True
    )
    os.close(write)
    assert done.stderr.decode().split() == ["False", "True"] * 50 + ["False"]
