"""The cert routes (``_cert``, ``_cert_login``) in the service's OpenAPI document, next to
AppRole's (``_openapi_approle``): their fields as Vault reads them (docs/TRANSIT.md, Cert)."""

from __future__ import annotations

from typing import Any

from ._cert import PREFIX
from ._openapi import _SECURITY, DURATION, STRING_LIST, _answers, _body, _param, named_operation

_TAG = ["cert"]
_LIST = STRING_LIST
_DURATION = DURATION
_ROLE = {
    "certificate": {"type": "string", "description": "PEM: the CA (or leaf) that must sign"},
    "allowed_common_names": _LIST,
    "allowed_dns_sans": _LIST,
    "allowed_email_sans": _LIST,
    "allowed_uri_sans": _LIST,
    "allowed_organizational_units": _LIST,
    "token_policies": _LIST,
    "token_ttl": _DURATION,
    "token_max_ttl": _DURATION,
    "display_name": {"type": "string"},
}


def _op(summary: str, codes: tuple[int, ...], body: dict[str, Any] | None = None) -> dict[str, Any]:
    return named_operation(_TAG[0], summary, codes, body)


def paths() -> dict[str, Any]:
    login = {
        "tags": _TAG,
        "summary": "Log in with the connection's TLS client certificate (no token)",
        "requestBody": _body({"name": {"type": "string"}}),
        "responses": _answers(200, 400, 413),
    }
    write = _op(
        "Create or change a certificate role (admin and its scopes)", (204, 403, 413), _ROLE
    )
    return {
        f"{PREFIX}login": {"post": login, "put": login},
        f"{PREFIX}certs": {
            "get": {
                "tags": _TAG,
                "summary": "Certificate role names (admin)",
                "parameters": [_param("list", "query", {"type": "string", "enum": ["true"]})],
                "responses": _answers(200, 403, 404, 405),
                "security": _SECURITY,
            }
        },
        f"{PREFIX}certs/{{name}}": {
            "get": _op("A certificate role (admin)", (200, 403, 404)),
            "delete": _op("Delete a certificate role (admin)", (204, 403)),
            "post": write,
            "put": write,
        },
    }
