"""An audit trail to tamper with: two writers interleaved in one path, rotated into several
files, closed cleanly; and the tampering of docs/AUDIT.md's list, each with the line that
``verify`` must name."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import orjson

from sealflow.service.audit import Auditor, FileSink, audit_key, writer_id

from .records import MASTER, REQUEST, Line, files_of, lines

KEY = audit_key(MASTER)


@dataclass(frozen=True)
class Trail:
    live: Path
    lines: list[Line]

    @property
    def files(self) -> list[Path]:
        return files_of(self.live)

    def of(self, writer: str) -> list[Line]:
        return [x for x in self.lines if x.record["writer"] == writer]

    @property
    def writers(self) -> list[str]:
        return list(dict.fromkeys(x.record["writer"] for x in self.lines))

    def after(self, line: Line) -> Line:
        """The record of the same writer after ``line``."""
        mine = self.of(line.record["writer"])
        return mine[mine.index(line) + 1]


def make_trail(folder: Path, records: int = 40, rotate_bytes: int = 3000) -> Trail:
    folder.mkdir()
    live = folder / "audit.log"
    auditors = [
        Auditor(KEY, [FileSink(live, rotate_bytes)], writer_id(), "required", 4, 1e9)
        for _ in range(2)
    ]
    for i in range(1, records + 1):
        for a in auditors:
            a.record({**REQUEST, "version": i})
            assert a.flush()
    for a in auditors:
        assert a.close()
    trail = Trail(live, lines(files_of(live)))
    assert len(trail.files) >= 5
    return trail


def rewrite(path: Path, edit: Callable[[list[bytes]], list[bytes]]) -> None:
    path.write_bytes(b"".join(raw + b"\n" for raw in edit(path.read_bytes().splitlines())))


def record_in_middle(trail: Trail) -> Line:
    """A record (not a checkpoint) of the first writer in a rotated file, with its writer's
    next record in the same file."""
    mine = trail.of(trail.writers[0])
    middle = trail.files[len(trail.files) // 2]
    return next(
        x
        for x in mine
        if x.path == middle and x.record["type"] == "request" and trail.after(x).path == middle
    )


# Each case tampers with the trail and says where the error must be: (path, line, words).
Expected = tuple[Path, int, str]


def one_byte_the_line_no_longer_parses(trail: Trail) -> Expected:
    x = record_in_middle(trail)
    rewrite(x.path, lambda ls: [b"[" + raw[1:] if raw == x.raw else raw for raw in ls])
    return x.path, x.number, "not a JSON record"


def one_byte_in_a_value(trail: Trail) -> Expected:
    x = record_in_middle(trail)
    changed = x.raw.replace(b'"status":200', b'"status":201')
    assert len(changed) == len(x.raw)
    assert changed != x.raw
    rewrite(x.path, lambda ls: [changed if raw == x.raw else raw for raw in ls])
    y = trail.after(x)  # its hash no longer matches the next record's prev
    return y.path, y.number, f"at {x.path}:{x.number}: that record was changed"


def one_byte_in_a_checkpoint(trail: Trail) -> Expected:
    x = next(x for x in trail.lines if x.record["type"] == "checkpoint")
    mac = x.record["hmac"]
    changed = x.raw.replace(mac.encode(), (mac[:-1] + ("0" if mac[-1] != "0" else "1")).encode())
    rewrite(x.path, lambda ls: [changed if raw == x.raw else raw for raw in ls])
    return x.path, x.number, "hmac does not verify"


def a_line_deleted(trail: Trail) -> Expected:
    x = record_in_middle(trail)
    rewrite(x.path, lambda ls: [raw for raw in ls if raw != x.raw])
    y = trail.after(x)
    return y.path, y.number - (y.path == x.path), "the 1 record(s) between are missing"


def two_lines_swapped(trail: Trail) -> Expected:
    x = record_in_middle(trail)
    y = trail.after(x)
    assert y.path == x.path

    def swap(ls: list[bytes]) -> list[bytes]:
        ls[x.number - 1], ls[y.number - 1] = ls[y.number - 1], ls[x.number - 1]
        return ls

    rewrite(x.path, swap)
    return x.path, x.number, "missing or were moved"


def a_forged_line_inserted(trail: Trail) -> Expected:
    # Forged well: the right seq and the hash of the line before it. It is the real
    # record after it that can no longer follow.
    x = record_in_middle(trail)
    forged = orjson.dumps(
        {
            **{k: v for k, v in x.record.items() if k not in ("seq", "prev")},
            "key": "someone-elses",
            "seq": x.record["seq"] + 1,
            "prev": hashlib.sha256(x.raw).hexdigest(),
        }
    )
    rewrite(x.path, lambda ls: [*ls[: x.number], forged, *ls[x.number :]])
    y = trail.after(x)
    where = f"at {x.path}:{x.number + 1}: a record was moved, repeated or inserted"
    return y.path, y.number + (y.path == x.path), where


def a_forged_writer_inserted(trail: Trail) -> Expected:
    # A chain of its own: nothing follows it, and no checkpoint seals it.
    x = record_in_middle(trail)
    forged = orjson.dumps(
        {**REQUEST, "time": x.record["time"], "writer": "w", "seq": 1, "prev": None}
    )
    rewrite(x.path, lambda ls: [*ls[: x.number], forged, *ls[x.number :]])
    return x.path, x.number + 1, "sealed by no checkpoint in a file no longer written"


def a_rotated_file_cut_short(trail: Trail) -> Expected:
    cut = trail.files[1]
    gone = [x for x in trail.lines if x.path == cut][-3:]
    rewrite(cut, lambda ls: ls[:-3])
    writers = {x.record["writer"] for x in gone}
    later = trail.files[2:]
    y = next(x for x in trail.lines if x.path in later and x.record["writer"] in writers)
    return y.path, y.number, "missing"


def a_rotated_file_cut_inside_a_line(trail: Trail) -> Expected:
    cut = trail.files[1]
    data = cut.read_bytes()
    cut.write_bytes(data[:-10])
    return cut, len(data.splitlines()), "the file ends inside a line"


def a_rotated_file_removed(trail: Trail) -> Expected:
    files = trail.files
    files[2].unlink()
    return files[3], 1, "missing"


CASES = [
    one_byte_the_line_no_longer_parses,
    one_byte_in_a_value,
    one_byte_in_a_checkpoint,
    a_line_deleted,
    two_lines_swapped,
    a_forged_line_inserted,
    a_forged_writer_inserted,
    a_rotated_file_cut_short,
    a_rotated_file_cut_inside_a_line,
    a_rotated_file_removed,
]
