"""sealflow's crypto engine: AEAD and C2SP chunked encryption, free of HTTP.

Importable on its own: ``from engine import seal, open, Algorithm``.
"""

from . import _calibration, _selection
from ._aead import AEAD, open, open_into, seal, seal_into
from ._buffers import AEADBuffer, BufferPool
from ._chunked import ChunkedDecryptor, ChunkedEncryptor, opened_size, sealed_size
from ._errors import DecryptionError, NativeError, SelfTestError
from ._hmac import Digest, HmacStream, hmac, hmac_many
from ._many import open_many, seal_many, seal_many_text
from ._pool import CryptoPool, parallelism
from ._provider import Provider
from ._records import OpenedRecords, Records, SealedRecords, TextLayout
from ._selection import (
    PROVIDERS,
    SMALL_LIMIT,
    Calibration,
    Measurement,
    SizeClass,
    calibrate,
    calibration,
    provider_choice,
    set_provider,
)
from ._selftest import self_test
from ._stats import context_stats
from ._strategy import get_context_strategy, set_context_strategy
from ._types import CHUNK_LEN, NONCE_LEN, TAG_LEN, Algorithm, ContextStrategy, RecordStatus

# The first use without a provider choice calibrates (docs/ENGINE.md). The calibration times
# the codecs, which select their provider through _selection: so it is handed in from here,
# the top, and _selection imports nothing above it.
_selection.use_calibrator(_calibration.measure)

__all__ = [
    "AEAD",
    "CHUNK_LEN",
    "NONCE_LEN",
    "PROVIDERS",
    "SMALL_LIMIT",
    "TAG_LEN",
    "AEADBuffer",
    "Algorithm",
    "BufferPool",
    "Calibration",
    "ChunkedDecryptor",
    "ChunkedEncryptor",
    "ContextStrategy",
    "CryptoPool",
    "DecryptionError",
    "Digest",
    "HmacStream",
    "Measurement",
    "NativeError",
    "OpenedRecords",
    "Provider",
    "RecordStatus",
    "Records",
    "SealedRecords",
    "SelfTestError",
    "SizeClass",
    "TextLayout",
    "calibrate",
    "calibration",
    "context_stats",
    "get_context_strategy",
    "hmac",
    "hmac_many",
    "open",
    "open_into",
    "open_many",
    "opened_size",
    "parallelism",
    "provider_choice",
    "seal",
    "seal_into",
    "seal_many",
    "seal_many_text",
    "sealed_size",
    "self_test",
    "set_context_strategy",
    "set_provider",
]
