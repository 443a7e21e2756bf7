"""The AppRole routes (``_approle``, ``_approle_login``) in the service's OpenAPI document, next
to the Transit routes' (``_openapi``): their fields as Vault reads them (docs/TRANSIT.md,
AppRole), so that CI's schemathesis run reaches them too."""

from __future__ import annotations

from typing import Any

from ._approle import PREFIX
from ._openapi import _SECURITY, DURATION, STRING_LIST, _answers, _body, _param, named_operation

_TAG = ["approle"]
_LIST = STRING_LIST
_DURATION = DURATION
_COUNT = {"type": ["integer", "string"]}
_ROLE = {
    "token_policies": _LIST,
    "token_ttl": _DURATION,
    "token_max_ttl": _DURATION,
    "token_num_uses": _COUNT,
    "secret_id_ttl": _DURATION,
    "secret_id_num_uses": _COUNT,
    "secret_id_bound_cidrs": _LIST,
    "bind_secret_id": {"type": ["boolean", "string"]},
}
_SECRET_ID = {
    "metadata": {"type": "string", "description": "a JSON object of strings, as text"},
    "cidr_list": _LIST,
    "ttl": _DURATION,
    "num_uses": _COUNT,
}


def _op(summary: str, codes: tuple[int, ...], body: dict[str, Any] | None = None) -> dict[str, Any]:
    return named_operation(_TAG[0], summary, codes, body)


def _writes(operation: dict[str, Any]) -> dict[str, Any]:
    return {"post": operation, "put": operation}


def paths() -> dict[str, Any]:
    login = {
        "tags": _TAG,
        "summary": "Log in with a role id and a secret id (no token): a token in Vault's auth",
        "requestBody": _body({"role_id": {"type": "string"}, "secret_id": {"type": "string"}}),
        "responses": _answers(200, 400, 413),
    }
    role = f"{PREFIX}role/{{name}}"
    secret = {"secret_id": {"type": "string"}}
    by = {"secret_id_accessor": {"type": "string"}}
    return {
        f"{PREFIX}login": {"post": login, "put": login},
        f"{PREFIX}role": {
            "get": {
                "tags": _TAG,
                "summary": "Role names (admin)",
                "parameters": [_param("list", "query", {"type": "string", "enum": ["true"]})],
                "responses": _answers(200, 403, 404, 405),
                "security": _SECURITY,
            }
        },
        role: {
            "get": _op("A role (admin)", (200, 403, 404)),
            "delete": _op("Delete a role and its secret ids (admin)", (204, 403)),
            **_writes(
                _op("Create or change a role (admin and its scopes)", (204, 403, 413), _ROLE)
            ),
        },
        f"{role}/role-id": {
            "get": _op("A role's role id (admin)", (200, 403, 404)),
            **_writes(
                _op(
                    "Set a custom role id (admin and the role's scopes)",
                    (204, 403, 404, 413),
                    {"role_id": {"type": "string"}},
                )
            ),
        },
        f"{role}/secret-id": {
            "get": {
                **_op(
                    "The accessors of a role's secret ids, with list=true (admin)",
                    (200, 400, 403, 404, 405),
                ),
                "parameters": [
                    _param("name"),
                    _param("list", "query", {"type": "string", "enum": ["true"]}),
                ],
            },
            **_writes(
                _op(
                    "A new secret id (admin and the role's scopes)",
                    (200, 403, 404, 413),
                    _SECRET_ID,
                )
            ),
        },
        f"{role}/custom-secret-id": _writes(
            _op(
                "A secret id the caller chose (admin and the role's scopes)",
                (200, 403, 404, 413),
                {**_SECRET_ID, **secret},
            )
        ),
        f"{role}/secret-id/lookup": _writes(
            _op("A secret id's properties, never itself (admin)", (200, 204, 403, 404, 413), secret)
        ),
        f"{role}/secret-id/destroy": _writes(
            _op("Destroy a secret id (admin)", (204, 403, 404, 413), secret)
        ),
        f"{role}/secret-id-accessor/lookup": _writes(
            _op("A secret id's properties by its accessor (admin)", (200, 400, 403, 404, 413), by)
        ),
        f"{role}/secret-id-accessor/destroy": _writes(
            _op("Destroy a secret id by its accessor (admin)", (204, 400, 403, 404, 413), by)
        ),
    }
