"""The Vault-Transit-compatible API (SPEC section 4, docs/TRANSIT.md), served as plain ASGI in
front of FastAPI like the data routes.

``_routes`` routes and authorises, ``_wire`` reads and writes Vault's JSON, ``_items`` reads a
request's items, ``_checks`` checks them, ``_leases`` leases their sealings, ``_crypto``
seals and opens them and ``_batch`` answers for them; ``_encrypt`` is encrypt (``_column``: the
common batch in one engine call), ``_data`` decrypt, rewrap and datakey; ``_ciphertext`` is the
``vault:v`` format, ``_keys`` the key routes, ``_sys`` health, ``_tokens`` Vault's token
routes (lookup, revocation by accessor), ``_approle`` and ``_approle_login`` Vault's AppRole,
``_cert``, ``_cert_match`` and ``_cert_login`` Vault's cert method, ``_login`` what every login
does; ``_openapi``, ``_openapi_approle`` and ``_openapi_cert`` describe the routes in the
OpenAPI document. A small
encrypt is answered by the same ``_encrypt.encryption``, from the ASGI path or by the protocol
(``Transit.answer``).
"""

from ._openapi import SECURITY_SCHEMES, paths
from ._openapi_approle import paths as approle_paths
from ._openapi_cert import paths as cert_paths
from ._routes import APPROLE_LOGIN, LOGINS, Route, Transit, authenticate, token_secret
from ._wire import permission_denied, refuse, token_expired

__all__ = [
    "APPROLE_LOGIN",
    "LOGINS",
    "SECURITY_SCHEMES",
    "Route",
    "Transit",
    "approle_paths",
    "authenticate",
    "cert_paths",
    "paths",
    "permission_denied",
    "refuse",
    "token_expired",
    "token_secret",
]
