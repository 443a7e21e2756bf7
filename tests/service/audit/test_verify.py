"""verify() itself: file order, chains continued across rotation, writers apart, and what it
says about files given partly (the commands' cases are in test_cli.py)."""

from __future__ import annotations

import hashlib
import itertools
import random
from pathlib import Path

from sealflow.service.audit import Finding, verify

from .trail import KEY, make_trail


def test_files_are_read_rotated_first_by_time_and_the_live_one_last(tmp_path: Path) -> None:
    trail = make_trail(tmp_path / "audit")
    shuffled = trail.files[:]
    random.Random(4).shuffle(shuffled)
    for given in (shuffled, [trail.live, *trail.files[:-1]], trail.files * 2):
        report = verify(given, KEY, strict=True)
        assert (report.ok, report.records, report.error) == (True, len(trail.lines), None)
    times = sorted(x.record["time"] for x in trail.lines)
    assert (report.first, report.last) == (times[0], times[-1])


def test_a_chain_goes_on_across_rotation_and_each_writer_has_its_own(tmp_path: Path) -> None:
    trail = make_trail(tmp_path / "audit")
    assert len(trail.writers) == 2
    crossings = 0
    for writer in trail.writers:
        mine = trail.of(writer)
        assert [x.record["seq"] for x in mine] == list(range(1, len(mine) + 1))
        for before, after in itertools.pairwise(mine):
            assert after.record["prev"] == hashlib.sha256(before.raw).hexdigest()
            crossings += before.path != after.path
    assert crossings >= len(trail.files) - 1  # the chains cross every rotation
    # Interleaved: the files hold both writers' records, alternately.
    assert {x.record["writer"] for x in trail.lines if x.path == trail.files[1]} == set(
        trail.writers
    )


def test_the_newest_files_alone_are_missing_their_chains_start(tmp_path: Path) -> None:
    trail = make_trail(tmp_path / "audit")
    report = verify(trail.files[2:], KEY, strict=False)
    assert report.error is not None
    assert (report.error.path, report.error.line) == (trail.files[2], 1)
    assert "its records before are missing" in report.error.message


def test_the_oldest_files_alone_end_in_chains_no_file_goes_on_with(tmp_path: Path) -> None:
    trail = make_trail(tmp_path / "audit")
    report = verify(trail.files[:2], KEY, strict=False)
    assert report.error is not None
    # Named from its writer's first record after its last checkpoint, to its last record.
    assert report.error.path in trail.files[:2]
    assert f", to {trail.files[1]}:" in report.error.message
    assert "or the files after it were not given" in report.error.message


def test_an_empty_file_holds_no_records_and_a_missing_one_is_an_error(tmp_path: Path) -> None:
    empty = tmp_path / "audit.log"
    empty.write_bytes(b"")
    report = verify([empty], KEY, strict=True)
    assert (report.ok, report.records, report.first, report.last) == (True, 0, None, None)
    report = verify([tmp_path / "none.log"], KEY, strict=False)
    assert report.error == Finding(
        tmp_path / "none.log", 0, "cannot read it: No such file or directory"
    )
    assert not report.ok
