"""sealflow's HTTP/1.1 server side: the one sub-package that imports uvicorn or httptools.

``HttpProtocol`` is the connection (``_protocol``), ``Cycle`` one request's ASGI exchange
(``_cycle``), ``Head`` a request's head scanned once (``_head``), ``Gate`` the process's open
connections under their cap (``_gate``, the cap from ``_capacity``), and ``serve`` runs uvicorn
with them (``_serve``). The app side plans each request (``Planner``, ``Options``).
"""

from ._capacity import Capacity, capacity
from ._cycle import HOLD_MAX
from ._gate import Gate
from ._head import DUPLEX, Head
from ._protocol import LIST_METHOD, OPTIONS, Answer, HttpProtocol, Options, Plan, Planner
from ._serve import serve

__all__ = [
    "DUPLEX",
    "HOLD_MAX",
    "LIST_METHOD",
    "OPTIONS",
    "Answer",
    "Capacity",
    "Gate",
    "Head",
    "HttpProtocol",
    "Options",
    "Plan",
    "Planner",
    "capacity",
    "serve",
]
