"""Cipher-context counters of both providers, in one shape for metrics and tests."""

from __future__ import annotations

from . import _binding, _pyca


def context_stats() -> dict[tuple[str, str, str], int]:
    """Events since process start, keyed by (provider, strategy or "any", event).

    Native: contexts created, re-keyed, reused and freed under each strategy.
    cryptography: keyed AEAD objects created and reused (it cannot re-key).
    """
    stats = {("native", s, e): n for (s, e), n in _binding.context_stats().items()}
    stats.update({("cryptography", "any", e): n for e, n in _pyca.context_stats().items()})
    return stats
