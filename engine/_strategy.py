"""The process-wide context strategy, read by the providers on every call.

LAZY until ``set_context_strategy`` says otherwise: the engine reads no environment at import
(the service passes ``SEALFLOW_CONTEXT_STRATEGY`` in from its Settings).
"""

from __future__ import annotations

from . import _binding
from ._types import ContextStrategy

# Read by the cryptography provider on every operation, so kept as a plain module global;
# the native side keeps its own copy, pushed by set_context_strategy.
current: int = ContextStrategy.LAZY.value
_binding.set_strategy(ContextStrategy.LAZY)


def get_context_strategy() -> ContextStrategy:
    return ContextStrategy(current)


def set_context_strategy(strategy: ContextStrategy | str) -> None:
    """Select the strategy for every thread's next operation; existing contexts adapt on use."""
    global current
    if isinstance(strategy, str):
        try:
            strategy = ContextStrategy[strategy.upper()]
        except KeyError:
            names = ", ".join(s.name.lower() for s in ContextStrategy)
            raise ValueError(
                f"context strategy must be one of {names} (got {strategy!r})"
            ) from None
    strategy = ContextStrategy(strategy)
    current = strategy.value
    _binding.set_strategy(strategy)
