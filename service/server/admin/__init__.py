"""FastAPI's routes: key management (``_keys``), the probes and metrics (``_health``), and the
API documentation pages (``_docs``)."""

from ._docs import install as install_docs
from ._health import router as health_router
from ._keys import router as keys_router

__all__ = ["health_router", "install_docs", "keys_router"]
