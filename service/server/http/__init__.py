"""sealflow's HTTP/1.1 server side: the one sub-package that imports uvicorn or httptools.

``HttpProtocol`` is the connection (``_protocol``), ``Cycle`` one request's ASGI exchange
(``_cycle``), ``Head`` a request's head scanned once (``_head``), ``Gate`` the process's open
connections under their cap (``_gate``, the cap from ``_capacity``), and ``serve`` runs uvicorn
with them (``_serve``). ``_tls`` makes the TLS contexts and reloads them on SIGHUP
(``install_hangup``); ``_peer`` reads a connection's client certificate (``PeerCert``). The app
side plans each request (``Planner``, ``Options``).
"""

from ._capacity import Capacity, capacity
from ._cycle import HOLD_MAX
from ._gate import Gate
from ._head import DUPLEX, Head
from ._peer import PeerCert
from ._protocol import LIST_METHOD, OPTIONS, Answer, HttpProtocol, Options, Plan, Planner
from ._serve import serve
from ._tls import install_hangup

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
    "PeerCert",
    "Plan",
    "Planner",
    "capacity",
    "install_hangup",
    "serve",
]
