"""``verify``: every writer's chain followed through the files (or the rows of the audit
table: ``verify_rows``), checkpoints checked.

Files are read in ``file_order`` (rotated files by time, the live file last), a table's rows
in order of arrival; both are ``Part``s, stretches of lines one checker reads in order. Within
them the writers' records interleave, and each writer's records must go on exactly where its
previous record left off: ``seq`` one more, ``prev`` the SHA-256 of its previous line. A
writer's first record must be seq 1 with no prev (else the files holding its start are missing
or cut, or its first rows deleted), and each checkpoint's HMAC must verify. The first record
that fails is reported and ends the check.

A writer's records after its last checkpoint prove nothing against someone who can write the
files (they can be cut or rewritten without a trace). Where the writer's chain ends in a live
part (a file not named as rotated, the table) they are an unsealed tail: a warning, an error
with ``strict``. Where it ends in a rotated file, nothing is still writing them: an error.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson

from ._files import file_order, is_rotated
from ._keys import checkpoint_key, checkpoint_mac

_READ = 1 << 20


@dataclass(frozen=True, slots=True)
class Finding:
    """What is wrong (or unproven) at a line of a file (line 0: the file as a whole), or at a
    row of the audit table (``path`` the table's name, ``line`` the row's id)."""

    path: Path | str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


@dataclass(frozen=True, slots=True)
class Report:
    """The outcome: ``records`` read (all of them when ``error`` is None), the first and last
    record times, the first error, and the unsealed tails (one per writer)."""

    records: int
    first: str | None
    last: str | None
    error: Finding | None
    unsealed: tuple[Finding, ...]
    strict: bool

    @property
    def ok(self) -> bool:
        return self.error is None and not (self.strict and self.unsealed)


class _Bad(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, slots=True)
class Part:
    """A stretch of the trail, read in order: ``lines`` yields each line's number (in a file)
    or id (in the table) and the line with its newline. ``live``: still being written, so a
    chain that ends unsealed in it is a warning (an error with ``strict``), not an error."""

    name: Path | str
    live: bool
    lines: Iterable[tuple[int, bytes]]


@dataclass(slots=True)
class _Writer:
    seq: int
    prev: str
    at: tuple[int, int]  # its last record's (part index, line)
    unsealed_from: tuple[int, int] | None  # its first record after its last checkpoint
    sealed: int  # the seq of its last checkpoint (0: none)


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """The file's lines, numbered from 1, newline included, up to its size when opened. The
    size is read under a shared lock, so no batch of a ``FileSink`` is half in it; the lines
    are read after the lock is released, so a long check never holds up the writers."""
    with path.open("rb") as f:
        fcntl.flock(f, fcntl.LOCK_SH)
        try:
            left = os.fstat(f.fileno()).st_size
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
        rest = b""
        number = 0
        while left:
            chunk = f.read(min(_READ, left))
            if not chunk:
                break
            left -= len(chunk)
            *whole, rest = (rest + chunk).split(b"\n")
            for line in whole:
                number += 1
                yield number, line + b"\n"
        if rest:
            yield number + 1, rest


class _Check:
    def __init__(self, key: bytes) -> None:
        self.parts: list[Part] = []  # those read so far
        self.ckey = checkpoint_key(key)
        self.writers: dict[str, _Writer] = {}
        self.records = 0
        self.first: str | None = None
        self.last: str | None = None

    def where(self, at: tuple[int, int]) -> str:
        return f"{self.parts[at[0]].name}:{at[1]}"

    def line(self, raw: bytes, at: tuple[int, int]) -> None:
        if not raw.endswith(b"\n"):
            raise _Bad("the file ends inside a line: it was cut short, or that line was changed")
        try:
            rec = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise _Bad("not a JSON record: the line was changed") from None
        if not isinstance(rec, dict):
            raise _Bad("not a JSON object: the line was changed")
        writer, seq, prev, when = (rec.get(f) for f in ("writer", "seq", "prev", "time"))
        if not (
            isinstance(writer, str)
            and type(seq) is int
            and (prev is None or isinstance(prev, str))
            and isinstance(when, str)
        ):
            raise _Bad("no writer, seq, prev or time of the right type: the line was changed")
        state = self.writers.get(writer)
        if state is None:
            if seq != 1 or prev is not None:
                raise _Bad(
                    f"writer {writer} starts at seq {seq}: its records before are missing (a"
                    " file removed or cut short, or not given)"
                )
        elif seq != state.seq + 1:
            before = f"its seq {state.seq} at {self.where(state.at)}"
            if seq <= state.seq:
                raise _Bad(
                    f"writer {writer}'s seq {seq} comes after {before}: a record was moved,"
                    " repeated or inserted"
                )
            raise _Bad(
                f"writer {writer}'s seq {seq} comes after {before}: the {seq - state.seq - 1}"
                " record(s) between are missing or were moved"
            )
        elif prev != state.prev:
            raise _Bad(
                f"prev is not the hash of writer {writer}'s record before it, at"
                f" {self.where(state.at)}: that record was changed, or this one forged"
            )
        if rec.get("type") == "checkpoint":
            mac = rec.get("hmac")
            good = checkpoint_mac(self.ckey, writer, seq, prev, when)
            if not (isinstance(mac, str) and hmac.compare_digest(mac, good)):
                raise _Bad(
                    "the checkpoint's hmac does not verify: the chain before it was changed,"
                    " or this is not the master key the records were written under"
                )
        digest = hashlib.sha256(raw[:-1]).hexdigest()
        if state is None:
            state = self.writers[writer] = _Writer(seq, digest, at, None, 0)
        state.seq, state.prev, state.at = seq, digest, at
        if rec.get("type") == "checkpoint":
            state.sealed, state.unsealed_from = seq, None
        elif state.unsealed_from is None:
            state.unsealed_from = at
        self.records += 1
        self.first = when if self.first is None else min(self.first, when)
        self.last = when if self.last is None else max(self.last, when)

    def tails(self) -> tuple[list[Finding], Finding | None]:
        """The unsealed tails of chains that end in a live part, and the first of those that
        end in a rotated file (an error)."""
        warnings: list[tuple[tuple[int, int], Finding]] = []
        errors: list[tuple[tuple[int, int], Finding]] = []
        for writer, state in self.writers.items():
            if state.unsealed_from is None:
                continue
            n = state.seq - state.sealed
            path, line = self.parts[state.unsealed_from[0]].name, state.unsealed_from[1]
            if not self.parts[state.at[0]].live:
                message = (
                    f"writer {writer}'s last {n} record(s), to {self.where(state.at)}, are"
                    " sealed by no checkpoint in a file no longer written: its process"
                    " stopped without closing, or records were cut or forged (or the files"
                    " after it were not given)"
                )
                errors.append((state.unsealed_from, Finding(path, line, message)))
            else:
                message = (
                    f"unsealed tail: writer {writer}'s last {n} record(s), to"
                    f" {self.where(state.at)}, follow its last checkpoint (a file still being"
                    " written, or a writer that stopped without closing)"
                )
                warnings.append((state.unsealed_from, Finding(path, line, message)))
        first = min(errors, key=lambda e: e[0])[1] if errors else None
        return [f for _, f in sorted(warnings, key=lambda w: w[0])], first


def verify(paths: Iterable[Path], key: bytes, strict: bool) -> Report:
    """Check the audit files ``paths`` (taken in ``file_order``) under the audit key ``key``."""
    files = file_order(dict.fromkeys(paths))
    return check([Part(path, not is_rotated(path), _lines(path)) for path in files], key, strict)


def verify_rows(table: str, rows: Iterable[tuple[int, bytes]], key: bytes, strict: bool) -> Report:
    """Check the rows of the audit table named ``table``, each its id and its line (without
    a newline) in order of arrival, under the audit key ``key``."""
    return check([Part(table, True, ((n, line + b"\n") for n, line in rows))], key, strict)


def check(parts: Iterable[Part], key: bytes, strict: bool) -> Report:
    """Every writer's chain followed through ``parts`` in the order given. A part whose lines
    cannot be read (OSError) is an error at its line 0."""
    checker = _Check(key)
    error: Finding | None = None
    for index, part in enumerate(parts):
        checker.parts.append(part)
        number = 0
        try:
            for number, raw in part.lines:
                checker.line(raw, (index, number))
        except _Bad as bad:
            error = Finding(part.name, number, bad.message)
        except OSError as exc:
            error = Finding(part.name, 0, f"cannot read it: {exc.strerror}")
        if error is not None:
            break
    unsealed: list[Finding] = []
    if error is None:
        unsealed, error = checker.tails()
    return Report(checker.records, checker.first, checker.last, error, tuple(unsealed), strict)
