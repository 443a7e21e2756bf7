"""The Auditor: checkpoints by count, by time and at close; the failure policies on real
failures (a full tmpfs, a removed folder); sinks failing apart; threads."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pytest

from sealflow.service.audit import (
    MAX_PENDING,
    Auditor,
    FileSink,
    Mode,
    audit_key,
    verify,
    writer_id,
)
from tests import tmpfs

from .records import MASTER, REQUEST, lines
from .test_sinks import fill

KEY = audit_key(MASTER)


def change(i: int) -> dict[str, object]:
    """A record that carries ``i`` (as its version)."""
    return {"type": "change", "origin": "http", "operation": "key_rotate", "key": "k", "version": i}


def auditor(path: Path, mode: Mode = "required", every: int = 1000, seconds: float = 10) -> Auditor:
    return Auditor(KEY, [FileSink(path, 0)], writer_id(), mode, every, seconds)


def kinds(path: Path) -> str:
    """The file's records as one letter each: c for a checkpoint, r for anything else."""
    return "".join("c" if x.record["type"] == "checkpoint" else "r" for x in lines([path]))


def versions(path: Path) -> list[int]:
    return [x.record["version"] for x in lines([path]) if x.record["type"] != "checkpoint"]


def test_a_checkpoint_follows_every_n_records_and_the_last_at_close(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    a = auditor(path, every=3, seconds=1e9)
    for i in range(1, 11):
        a.record(change(i))
        if i % 4 == 0:
            assert a.flush()
    assert a.close()
    assert kinds(path) == "rrrcrrrcrrrcrc"
    assert verify([path], KEY, strict=True).ok


def test_a_flush_due_by_time_ends_with_a_checkpoint_and_an_idle_one_writes_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.log"
    a = auditor(path, seconds=0)
    a.record(change(1))
    a.record(change(2))
    assert a.flush()
    assert a.flush()  # nothing queued, nothing unsealed
    assert a.close()  # sealed already: no second checkpoint
    assert kinds(path) == "rrc"


def test_records_flushed_before_their_checkpoint_was_due_are_sealed_by_a_later_idle_flush(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.log"
    a = auditor(path, seconds=0.5)
    a.record(change(1))
    assert a.flush()
    time.sleep(0.6)  # past checkpoint_seconds: the idle flush below is due
    assert a.flush()
    assert kinds(path).endswith("rc")
    assert verify([path], KEY, strict=True).unsealed == ()


def test_closing_an_auditor_that_recorded_nothing_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    assert auditor(path).close()
    assert path.read_bytes() == b""


def test_what_record_refuses(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    a = auditor(path)
    with pytest.raises(ValueError, match="set by the auditor"):
        a.record({**change(1), "seq": 5})
    with pytest.raises(ValueError, match="set by the auditor"):
        a.record({**REQUEST, "time": "2020-01-01T00:00:00.000000Z"})  # ``when`` says it
    with pytest.raises(TypeError):
        a.record({**change(1), "key": object()})
    assert a.record(REQUEST, when=1577836800.25) == 1  # tickets count the records queued
    assert a.written == 0
    assert a.close()
    assert a.written == 1
    assert a.close()  # twice is fine
    with pytest.raises(RuntimeError, match="closed"):
        a.record(change(2))
    written = lines([path])
    assert [x.record["time"] for x in written][:1] == ["2020-01-01T00:00:00.250000Z"]
    assert kinds(path) == "rc"


def test_required_on_a_full_disk_keeps_every_record_until_space_returns(tmp_path: Path) -> None:
    with tmpfs.mounted(tmp_path / "disk", 256 * 1024) as disk:
        path = disk / "audit.log"
        a = auditor(path, seconds=1e9)
        a.record(change(1))
        assert a.flush()
        assert not a.failing
        fill(disk / "filler")
        for batch in range(3):  # each flush tries everything not yet written, and fails
            for i in range(2 + 40 * batch, 2 + 40 * (batch + 1)):
                a.record({**change(i), "label": "x" * 200})
            assert not a.flush()
            assert a.failing
            assert versions(path) == [1]
        (disk / "filler").unlink()
        a.record(change(122))
        assert a.flush()
        assert not a.failing
        assert a.close()
        assert a.dropped == 0
        assert versions(path) == list(range(1, 123))
        report = verify([path], KEY, strict=True)
        assert (report.ok, report.records) == (True, 123)


def test_best_effort_on_a_full_disk_drops_and_counts_and_the_gap_shows(tmp_path: Path) -> None:
    with tmpfs.mounted(tmp_path / "disk", 256 * 1024) as disk:
        path = disk / "audit.log"
        a = auditor(path, "best_effort", seconds=1e9)
        a.record(change(1))
        assert a.flush()
        fill(disk / "filler")
        for i in range(2, 42):
            a.record({**change(i), "label": "x" * 200})
        assert not a.flush()
        assert (a.failing, a.dropped) == (False, 40)
        (disk / "filler").unlink()
        a.record(change(42))
        assert a.flush()
        assert a.close()
        assert versions(path) == [1, 42]
        report = verify([path], KEY, strict=False)
        assert report.error is not None
        assert report.error.line == 2
        assert "the 40 record(s) between are missing" in report.error.message


def test_a_removed_folder_fails_required_until_it_is_back_and_nothing_is_lost_after(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "audit"
    folder.mkdir()
    path = folder / "audit.log"
    a = auditor(path, seconds=1e9)
    a.record(change(1))
    assert a.flush()
    shutil.rmtree(folder)
    a.record(change(2))
    assert not a.flush()
    assert a.failing
    folder.mkdir()
    a.record(change(3))
    assert a.flush()
    assert not a.failing
    assert a.close()
    assert versions(path) == [2, 3]  # record 1 went with the folder
    report = verify([path], KEY, strict=True)
    assert report.error is not None
    assert "starts at seq 2" in report.error.message


def test_a_sink_that_fails_never_makes_another_write_a_line_twice(tmp_path: Path) -> None:
    good, gone = tmp_path / "good.log", tmp_path / "gone" / "audit.log"
    gone.parent.mkdir()
    sinks = [FileSink(good, 0), FileSink(gone, 0)]
    a = Auditor(KEY, sinks, writer_id(), "required", checkpoint_seconds=1e9)
    a.record(change(1))
    assert a.flush()
    shutil.rmtree(gone.parent)
    for i in range(2, 5):
        a.record(change(i))
        assert not a.flush()
        assert a.failing
    assert versions(good) == [1, 2, 3, 4]
    gone.parent.mkdir()
    assert a.flush()
    assert a.close()
    assert versions(good) == [1, 2, 3, 4]
    assert versions(gone) == [2, 3, 4]
    assert [x.raw for x in lines([gone])] == [x.raw for x in lines([good])][1:]
    assert verify([good], KEY, strict=True).ok


def test_threads_recording_and_flushing_at_once_make_one_whole_chain(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    a = auditor(path, every=50)
    done = threading.Event()

    def flusher() -> None:
        while not done.is_set():
            assert a.flush()

    def recorder(t: int) -> None:
        for i in range(300):
            a.record(change(t * 1000 + i + 1))

    background = threading.Thread(target=flusher)
    background.start()
    threads = [threading.Thread(target=recorder, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done.set()
    background.join()
    assert a.close()
    got = versions(path)
    assert sorted(got) == sorted(t * 1000 + i + 1 for t in range(8) for i in range(300))
    for t in range(8):  # each thread's records in the order it made them
        mine = [v for v in got if v // 1000 == t]
        assert mine == sorted(mine)
    report = verify([path], KEY, strict=True)
    assert (report.ok, report.records) == (True, 2400 + 2400 // 50)


def test_required_holds_at_most_max_pending_lines_and_counts_the_rest(tmp_path: Path) -> None:
    folder = tmp_path / "audit"
    folder.mkdir()
    path = folder / "audit.log"
    a = auditor(path, every=10**9, seconds=1e9)
    shutil.rmtree(folder)
    for i in range(MAX_PENDING):
        a.record(change(i + 1))
    assert not a.flush()
    assert (a.failing, a.dropped) == (True, 0)  # held, to be written again
    a.record(change(MAX_PENDING + 1))
    assert not a.flush()
    assert (a.failing, a.dropped) == (True, MAX_PENDING + 1)  # past the bound: let go
    folder.mkdir()
    a.record(change(MAX_PENDING + 2))
    assert a.flush()
    assert a.close()
    assert versions(path) == [MAX_PENDING + 2]


class GatedSink(FileSink):
    """A file sink that says it is remote (as the PostgreSQL table does) and whose writes wait
    for the test's go-ahead, so that a write is in flight for as long as the test needs."""

    remote = True

    def __init__(self, path: Path) -> None:
        super().__init__(path, 0)
        self.go = threading.Event()
        self.entered = threading.Semaphore(0)
        self.batches: list[int] = []  # lines per write
        self.threads: set[str] = set()

    def write(self, lines: list[bytes]) -> None:
        self.entered.release()
        assert self.go.wait(60)
        self.batches.append(len(lines))
        self.threads.add(threading.current_thread().name)
        super().write(lines)


def test_a_remote_sink_is_written_by_the_writer_thread_in_grouped_batches(tmp_path: Path) -> None:
    """With ``start_writer``, ``flush`` hands the batch over and returns while the sink's write
    is still in flight; batches cut meanwhile go in one write after it (a group commit); each
    write is reported with its last ticket; ``close`` has the thread write the last records and
    the final checkpoint."""
    path = tmp_path / "audit.log"
    sink = GatedSink(path)
    a = Auditor(KEY, [sink], writer_id(), "required", 1000, 1e9)
    reports: list[tuple[int, bool]] = []
    reported = threading.Semaphore(0)

    def done(upto: int, wrote: bool) -> None:
        reports.append((upto, wrote))
        reported.release()

    assert a.start_writer(done)
    assert a.threaded
    first = a.record(change(1))
    assert a.flush()  # returns with the write in flight: the recording thread never waits
    assert sink.entered.acquire(timeout=60)
    assert a.cut == first  # chained and handed over,
    assert a.written == 0  # not written yet
    tickets = []
    for i in range(2, 5):  # three more turns' batches while the first is written
        tickets.append(a.record(change(i)))
        a.flush()
    sink.go.set()
    for _ in range(2):
        assert reported.acquire(timeout=60)
    assert reports == [(first, True), (tickets[-1], True)]
    assert sink.batches == [1, 3]
    assert sink.threads == {"sealflow-audit"}
    assert a.written == tickets[-1]
    last = a.record(change(5))
    assert a.close()
    assert a.written == last
    report = verify([path], KEY, strict=True)
    assert report.ok, report.error
    assert report.records == 6  # five records and the final checkpoint
    assert kinds(path) == "rrrrrc"


def test_local_sinks_stay_written_inline(tmp_path: Path) -> None:
    """A file alone: ``start_writer`` starts no thread, and ``flush`` has written the batch when
    it returns (a thread hop would cost more than the write)."""
    path = tmp_path / "audit.log"
    a = auditor(path)
    assert not a.start_writer(lambda upto, wrote: None)
    assert not a.threaded
    ticket = a.record(change(1))
    assert a.flush()
    assert a.written == ticket
    assert kinds(path) == "r"
    assert a.close()
