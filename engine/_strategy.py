"""The process-wide context strategy, read by the providers on every call."""

from __future__ import annotations

import os

from . import _native
from ._types import ContextStrategy


def _from_env() -> ContextStrategy:
    raw = os.environ.get("SEALFLOW_CONTEXT_STRATEGY", "lazy").strip().upper()
    try:
        return ContextStrategy[raw]
    except KeyError:
        raise ValueError(
            f"SEALFLOW_CONTEXT_STRATEGY must be one of lazy, hybrid, eager (got {raw.lower()!r})"
        ) from None


# Read by the cryptography provider on every operation, so kept as a plain module global;
# the native side keeps its own copy, pushed by set_context_strategy.
current: int = _from_env().value
_native.set_strategy(current)


def get_context_strategy() -> ContextStrategy:
    return ContextStrategy(current)


def set_context_strategy(strategy: ContextStrategy | str) -> None:
    """Select the strategy for every thread's next operation; existing contexts adapt on use."""
    global current
    if isinstance(strategy, str):
        strategy = ContextStrategy[strategy.upper()]
    current = ContextStrategy(strategy).value
    _native.set_strategy(current)
