"""FastAPI's routes: key management (``_keys``) and the probes and metrics (``_health``)."""

from ._health import router as health_router
from ._keys import router as keys_router

__all__ = ["health_router", "keys_router"]
