"""The engine's exceptions."""


class DecryptionError(Exception):
    """Authentication failed: wrong key, context or AAD, or modified, truncated or extended data.

    One type and one message for every cause, so callers cannot leak which one.
    """

    def __init__(self) -> None:
        super().__init__("decryption failed")


class NativeError(RuntimeError):
    """OpenSSL reported an error; the message is the drained error queue (never key material)."""


class SelfTestError(RuntimeError):
    """A known-answer test failed: the engine must not be used."""
