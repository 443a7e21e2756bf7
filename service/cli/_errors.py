"""The failure ``sealflow encrypt`` / ``decrypt`` words for the user themselves."""

from __future__ import annotations


class ClientError(Exception):
    """A failure already worded for the user; ``code`` is the exit status to use."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code
