"""A transport that goes nowhere: what sealflow's HTTP protocol writes, and whether it closed,
read back by the in-process protocol tests (``conftest``) and by ``benchmarks.wire``."""

from __future__ import annotations

import re
from typing import Any


class Wire:
    """What the protocol writes, and whether it closed: a transport that goes nowhere."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.closed = False
        self.aborted = False
        self.eof = False
        self.reading = True

    def write(self, data: bytes) -> None:
        assert not self.closed, "written after close"
        self.data += data

    def writelines(self, pieces: Any) -> None:
        for piece in pieces:
            self.write(piece)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8080), "peername": ("127.0.0.1", 50000)}.get(
            name, default
        )

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = self.aborted = True

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def statuses(self) -> list[int]:
        return [int(s) for s in re.findall(rb"HTTP/1\.1 (\d{3}) ", bytes(self.data))]
