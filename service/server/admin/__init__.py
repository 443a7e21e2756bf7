"""FastAPI's routes: key management (``_keys``, ``_lifecycle``, ``_import``), token management
(``_tokens``), the probes and metrics (``_health``), and the
API documentation pages (``_docs``)."""

from ._docs import install as install_docs
from ._health import router as health_router
from ._import import router as import_router
from ._keys import router as keys_router
from ._lifecycle import router as lifecycle_router
from ._tokens import router as tokens_router

__all__ = [
    "health_router",
    "import_router",
    "install_docs",
    "keys_router",
    "lifecycle_router",
    "tokens_router",
]
