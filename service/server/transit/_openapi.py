"""The Transit routes in the service's OpenAPI document (served at ``/openapi.json``, drawn by
``/docs``), under the configured mount.

They are served as plain ASGI (``_routes``), not by FastAPI, so they are described here by
hand: the fields each route reads (docs/TRANSIT.md has the semantics), the statuses it answers,
and Vault's ``X-Vault-Token`` header next to ``Authorization: Bearer``. Bodies are described
as loosely as Vault reads them (``key_version`` may come as a string): clients send numbers and
booleans as strings, and the server converts them.
"""

from __future__ import annotations

from typing import Any

_TAG = ["transit"]
_LENIENT_INT = {"type": ["integer", "string"]}
_LENIENT_BOOL = {"type": ["boolean", "string"]}
_B64 = {"type": "string", "description": "standard padded base64"}
_SECURITY: list[dict[str, list[str]]] = [{"VaultToken": []}, {"HTTPBearer": []}]
_ENVELOPE = {
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "properties": {
                    "request_id": {"type": "string"},
                    "data": {"type": "object"},
                    "warnings": {"type": ["array", "null"], "items": {"type": "string"}},
                },
            }
        }
    }
}
_ERRORS = {
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "properties": {"errors": {"type": "array", "items": {"type": "string"}}},
            }
        }
    }
}


def _answers(*codes: int) -> dict[str, Any]:
    described = {
        200: "success, in Vault's envelope",
        204: "done, no body",
        400: "refused (Vault's message); a batch with a failed item carries the whole envelope",
        403: "permission denied: no token, an unknown one, or a scope that does not cover it",
        404: "no such key (or path)",
        405: "a method this route does not take",
        413: "the body exceeds SEALFLOW_MAX_JSON_BYTES",
        429: "this token already has its most requests in flight",
        500: "OpenBao's own 500, in its framework's words (a go-multierror), where OpenBao"
        " answers one: signing with a version or salt length the key refuses, a derived key"
        " without context, a soft-deleted key's export (docs/TRANSIT.md)",
        503: "the server is at its concurrency limit, or the keystore is unavailable",
    }
    answers: dict[str, Any] = {}
    for code in sorted({*codes, 400, 429, 503}):
        answers[str(code)] = {"description": described[code]}
        if code == 200:
            answers[str(code)].update(_ENVELOPE)
        elif code != 204:
            answers[str(code)].update(_ERRORS)
    return answers


def _body(properties: dict[str, Any]) -> dict[str, Any]:
    schema = {"type": "object", "properties": properties}
    return {"required": False, "content": {"application/json": {"schema": schema}}}


def _param(name: str, where: str = "path", schema: Any = None) -> dict[str, Any]:
    return {
        "name": name,
        "in": where,
        "required": where == "path",
        "schema": schema or {"type": "string"},
    }


# The auth methods' role fields (``_openapi_approle``, ``_openapi_cert``), as Vault reads them.
STRING_LIST = {"type": ["array", "string"], "items": {"type": "string"}}
DURATION = {"type": ["integer", "string"], "description": "seconds, or 90s, 30m, 1h"}


def named_operation(
    tag: str, summary: str, codes: tuple[int, ...], body: dict[str, Any] | None = None
) -> dict[str, Any]:
    """An operation on a path with a ``{name}`` (an auth method's role), for a token."""
    operation: dict[str, Any] = {
        "tags": [tag],
        "summary": summary,
        "parameters": [_param("name")],
        "responses": _answers(*codes),
        "security": _SECURITY,
    }
    if body is not None:
        operation["requestBody"] = _body(body)
    return operation


def _write(summary: str, body: dict[str, Any], params: list[dict[str, Any]]) -> dict[str, Any]:
    operation = {
        "tags": _TAG,
        "summary": summary,
        "parameters": params,
        "requestBody": _body(body),
        "responses": _answers(200, 400, 403, 413),
        "security": _SECURITY,
    }
    return {"post": operation, "put": operation}


_ITEM = {
    "reference": {"type": "string"},
    "associated_data": _B64,
    "key_version": _LENIENT_INT,
    "context": _B64,  # a derived key's (docs/TRANSIT.md, Derived keys and convergent encryption)
}
_BATCH = {"partial_failure_response_code": _LENIENT_INT}


def paths(mount: str) -> dict[str, Any]:
    """The OpenAPI ``paths`` of the Transit routes under ``mount`` (e.g. ``/v1/transit``)."""
    name = _param("name")
    encrypt_item = {"plaintext": _B64, **_ITEM}
    decrypt_item = {"ciphertext": {"type": "string"}, **_ITEM}

    def batch_of(item: dict[str, Any]) -> dict[str, Any]:
        items = {"type": "array", "items": {"type": "object", "properties": item}}
        return {**item, **_BATCH, "batch_input": items}

    key_read = {
        "tags": _TAG,
        "summary": "A key's metadata (admin, or encrypt/decrypt on it)",
        "parameters": [name],
        "responses": _answers(200, 403, 404),
        "security": _SECURITY,
    }
    key_write = {
        "tags": _TAG,
        "summary": "Create a key (admin)",
        "parameters": [name],
        "requestBody": _body(
            {
                "type": {"type": "string", "enum": _KEY_TYPES},
                "key_size": {**_LENIENT_INT, "description": "hmac keys: 32 to 512 bytes"},
                "derived": _LENIENT_BOOL,
                "convergent_encryption": _LENIENT_BOOL,
                "exportable": _LENIENT_BOOL,
            }
        ),
        "responses": _answers(200, 400, 403),
        "security": _SECURITY,
    }
    key_delete = {
        "tags": _TAG,
        "summary": "Delete the key and all its versions (admin): 204 once deletion_allowed is"
        " set, else 400 (also for a key that does not exist, as in Transit)",
        "parameters": [name],
        "responses": _answers(204, 400, 403),
        "security": _SECURITY,
    }
    admin_write = _answers(200, 400, 403)
    return {
        f"{mount}/encrypt/{{name}}": _write(
            "Encrypt base64 plaintext, or a batch_input of items", batch_of(encrypt_item), [name]
        ),
        f"{mount}/decrypt/{{name}}": _write(
            "Decrypt vault:v ciphertext, or a batch_input of items", batch_of(decrypt_item), [name]
        ),
        f"{mount}/rewrap/{{name}}": _write(
            "Re-encrypt ciphertext under the latest (or given) version",
            batch_of(decrypt_item),
            [name],
        ),
        f"{mount}/datakey/{{type}}/{{name}}": _write(
            "A new random data key sealed under the key (and in plaintext with 'plaintext')",
            {"bits": _LENIENT_INT, "key_version": _LENIENT_INT, "context": _B64},
            [_param("type", schema={"type": "string", "enum": ["plaintext", "wrapped"]}), name],
        ),
        f"{mount}/keys": {
            "get": {
                "tags": _TAG,
                "summary": "Key names (admin); also Vault's LIST method; a page of them with"
                " 'after' (names strictly after it) and 'limit' (at most that many; 0 or less:"
                " all), as OpenBao pages them",
                "parameters": [
                    {
                        **_param("list", "query", {"type": "string", "enum": ["true"]}),
                        "required": True,
                    },
                    _param("after", "query"),
                    _param("limit", "query", _LENIENT_INT),
                ],
                "responses": _answers(200, 403, 404, 405),
                "security": _SECURITY,
            }
        },
        f"{mount}/keys/{{name}}": {
            "get": key_read,
            "post": key_write,
            "put": key_write,
            "delete": key_delete,
        },
        f"{mount}/keys/{{name}}/rotate": {
            "post": {
                "tags": _TAG,
                "summary": "A new version (admin)",
                "parameters": [name],
                "responses": admin_write,
                "security": _SECURITY,
            }
        },
        f"{mount}/keys/{{name}}/config": {
            "post": {
                "tags": _TAG,
                "summary": "min_decryption_version, min_encryption_version, deletion_allowed,"
                " auto_rotate_period, exportable, allow_plaintext_backup (admin; the last two"
                " export too)",
                "parameters": [name],
                "requestBody": _body(
                    {
                        "min_decryption_version": _LENIENT_INT,
                        "min_encryption_version": _LENIENT_INT,
                        "deletion_allowed": _LENIENT_BOOL,
                        "exportable": _LENIENT_BOOL,
                        "allow_plaintext_backup": _LENIENT_BOOL,
                    }
                ),
                "responses": admin_write,
                "security": _SECURITY,
            }
        },
        **_utilities(mount),
        **_macs(mount),
        **_signing(mount),
        f"{mount}/keys/{{name}}/trim": {
            "post": {
                "tags": _TAG,
                "summary": "Remove the versions below min_available_version (admin)",
                "parameters": [name],
                "requestBody": _body({"min_available_version": _LENIENT_INT}),
                "responses": admin_write,
                "security": _SECURITY,
            }
        },
        f"{mount}/keys/{{name}}/soft-delete": {
            "delete": {
                "tags": _TAG,
                "summary": "Refuse every use of the key until restored (admin)",
                "parameters": [name],
                "responses": _answers(200, 204, 403),
                "security": _SECURITY,
            }
        },
        f"{mount}/keys/{{name}}/soft-delete-restore": {
            "post": {
                "tags": _TAG,
                "summary": "Lift a soft deletion, every version usable again (admin)",
                "parameters": [name],
                "responses": _answers(200, 204, 403),
                "security": _SECURITY,
            }
        },
        f"{mount}/wrapping_key": {
            "get": {
                "tags": _TAG,
                "summary": "The RSA-4096 import wrapping key's public half, PEM (any token)",
                "responses": _answers(200, 403),
                "security": _SECURITY,
            }
        },
        f"{mount}/keys/{{name}}/import": {
            "post": _import("A key of imported material (admin and export on the key)", _IMPORT)
        },
        f"{mount}/keys/{{name}}/import_version": {
            "post": _import("The next version of an imported key (admin and export)", _WRAPPED)
        },
        f"{mount}/byok-export/{{destination}}/{{source}}": {
            "get": {
                "tags": _TAG,
                "summary": "Every version of an exportable key wrapped for a public-key-only key,"
                " in the import format (admin and export on the source)",
                "parameters": [
                    _param("destination"),
                    _param("source"),
                    _param("hash", "query", {"type": "string"}),
                ],
                "responses": _answers(200, 400, 403),
                "security": _SECURITY,
            }
        },
        f"{mount}/export/{{type}}/{{name}}": {
            "get": {
                "tags": _TAG,
                "summary": "Every version's key material of an exportable key (admin);"
                " public-key: any signing key's public halves (admin, or verify on the key)",
                "parameters": [
                    _param("type", schema={"type": "string", "enum": _EXPORT_TYPES}),
                    name,
                    _param("format", "query", _EXPORT_FORMAT),
                ],
                "responses": _answers(200, 400, 403, 404, 500),
                "security": _SECURITY,
            }
        },
        f"{mount}/export/{{type}}/{{name}}/{{version}}": {
            "get": {
                "tags": _TAG,
                "summary": "One version's key material (or public half), as above; 'latest'"
                " names the latest",
                "parameters": [
                    _param("type", schema={"type": "string", "enum": _EXPORT_TYPES}),
                    name,
                    _param("version"),
                    _param("format", "query", _EXPORT_FORMAT),
                ],
                "responses": _answers(200, 400, 403, 404, 500),
                "security": _SECURITY,
            }
        },
        f"{mount}/backup/{{name}}": {
            "get": {
                "tags": _TAG,
                "summary": "The key in the clear, as sealflow's backup (admin and export; the"
                " key exportable and allow_plaintext_backup)",
                "parameters": [name],
                "responses": _answers(200, 400, 403),
                "security": _SECURITY,
            }
        },
        f"{mount}/restore/{{name}}": {
            "post": {
                "tags": _TAG,
                "summary": "The key of a backup made again, under this name or its own"
                " (restore without a name); force replaces a key that may be deleted (admin"
                " and export)",
                "parameters": [name],
                "requestBody": _body({"backup": _B64, "force": _LENIENT_BOOL}),
                "responses": _answers(204, 400, 403),
                "security": _SECURITY,
            }
        },
        "/v1/sys/health": {
            "get": {
                "tags": _TAG,
                "summary": "Vault's health: 200 ready, 503 starting, 429 draining (no token)",
                "parameters": [
                    _param(code, "query", _LENIENT_INT)
                    for code in ("activecode", "sealedcode", "standbycode")
                ]
                + [_param("standbyok", "query", _LENIENT_BOOL)],
                "responses": {
                    "200": {"description": "ready"},
                    "429": {"description": "draining"},
                    "503": {"description": "starting"},
                },
            }
        },
        "/v1/auth/token/lookup-self": {
            "get": {
                "tags": _TAG,
                "summary": "The calling token, as Vault describes a non-expiring service token",
                "responses": _answers(200, 403),
                "security": _SECURITY,
            }
        },
        "/v1/auth/token/lookup-accessor": _token_route(
            "The token an accessor names, as lookup-self shows it but with an empty id (admin);"
            " 400 invalid accessor for one unknown or revoked",
            _ACCESSOR,
            _answers(200, 400, 403, 413),
        ),
        "/v1/auth/token/revoke-accessor": _token_route(
            "Revoke the token an accessor names and its children (admin): 204; 200 with the"
            " warning 'No token found with this accessor' for one unknown or revoked already",
            _ACCESSOR,
            _answers(200, 204, 400, 403, 413),
        ),
        **{
            f"/v1/auth/token/{name}": _token_route(summary, _CREATE, _answers(200, 400, 403, 413))
            for name, summary in (
                ("create", "A child token with a subset of the caller's scopes (admin)"),
                ("create-orphan", "A token not revoked with the caller (admin)"),
            )
        },
        "/v1/auth/token/lookup": _token_route(
            "The token whose secret is 'token' (admin); 403 bad token for one unknown",
            {"token": _STRING},
            _answers(200, 400, 403, 413),
        ),
        "/v1/auth/token/renew": _token_route(
            "Renew the token whose secret is 'token' (admin), capped at its maximum",
            {"token": _STRING, "increment": _DURATION},
            _answers(200, 400, 403, 413),
        ),
        "/v1/auth/token/renew-self": _token_route(
            "Renew the calling token, capped at its maximum with Vault's warning",
            {"increment": _DURATION},
            _answers(200, 400, 403, 413),
        ),
        "/v1/auth/token/renew-accessor": _token_route(
            "Renew the token an accessor names (admin); client_token is empty",
            {**_ACCESSOR, "increment": _DURATION},
            _answers(200, 400, 403, 413),
        ),
        "/v1/auth/token/revoke": _token_route(
            "Revoke the token whose secret is 'token' and its children (admin): 204",
            {"token": _STRING},
            _answers(204, 400, 403, 413),
        ),
        "/v1/auth/token/revoke-self": _token_route(
            "Revoke the calling token and its children: 204", {}, _answers(204, 400, 403, 413)
        ),
    }


_STRING = {"type": "string"}
_WRAPPED = {
    "ciphertext": {
        "type": "string",
        "description": "base64: RSA-OAEP of an ephemeral AES-256 key, then AES-KWP of the key",
    },
    "hash_function": {"type": "string", "enum": ["SHA1", "SHA224", "SHA256", "SHA384", "SHA512"]},
}
_IMPORT = {
    **_WRAPPED,
    "type": {
        "type": "string",
        "enum": [
            "aes128-gcm96",
            "aes256-gcm96",
            "chacha20-poly1305",
            "rsa-2048",
            "rsa-3072",
            "rsa-4096",
        ],
    },
    "public_key": {"type": "string", "description": "PEM; with an rsa-* type, no ciphertext"},
    "exportable": _LENIENT_BOOL,
    "allow_rotation": _LENIENT_BOOL,
    "auto_rotate_period": {"type": ["string", "integer"]},
}


_HASHES = [f"sha{family}-{bits}" for family in (2, 3) for bits in (224, 256, 384, 512)]
_FORMAT = {"type": "string", "enum": ["hex", "base64"]}


_KEY_TYPES = [
    "aes128-gcm96",
    "aes256-gcm96",
    "chacha20-poly1305",
    "hmac",
    "ed25519",
    "ecdsa-p256",
    "ecdsa-p384",
    "ecdsa-p521",
    "rsa-2048",
    "rsa-3072",
    "rsa-4096",
]
_MAC_HASHES = ["sha1", *_HASHES]


_EXPORT_TYPES = ["encryption-key", "hmac-key", "public-key", "signing-key"]
_EXPORT_FORMAT = {"type": "string", "enum": ["", "raw", "der", "pem"]}
# The fields of a signature, signing and verifying alike (OpenBao's path_sign_verify.go).
_SIGNATURE_OPTIONS = {
    "hash_algorithm": {"type": "string"},
    "algorithm": {"type": "string", "description": "deprecated: hash_algorithm"},
    "signature_algorithm": {"type": "string", "enum": ["pss", "pkcs1v15"]},
    "marshaling_algorithm": {"type": "string", "enum": ["asn1", "jws"]},
    "salt_length": {"type": ["string", "integer"], "description": "auto, hash, or a number"},
    "prehashed": _LENIENT_BOOL,
    "key_version": _LENIENT_INT,
}


def _signing(mount: str) -> dict[str, Any]:
    """``sign/:name[/:hash_algorithm]`` (scope ``sign``)."""
    item = {"input": _B64, "context": _B64, "reference": {"type": "string"}}
    body = {
        **item,
        **_SIGNATURE_OPTIONS,
        "batch_input": {"type": "array", "items": {"type": "object", "properties": item}},
    }
    summary = "A signature (vault:vN:) of base64 input under the key's version (sign scope)"
    name = _param("name")
    hashing = _param("hash_algorithm")
    operation = {
        "tags": _TAG,
        "summary": summary,
        "parameters": [name],
        "requestBody": _body(body),
        "responses": _answers(200, 400, 403, 413, 500),
        "security": _SECURITY,
    }
    with_hash = {**operation, "parameters": [name, hashing]}
    return {
        f"{mount}/sign/{{name}}": {"post": operation, "put": operation},
        f"{mount}/sign/{{name}}/{{hash_algorithm}}": {"post": with_hash, "put": with_hash},
    }


def _macs(mount: str) -> dict[str, Any]:
    """``hmac/:name[/:algorithm]``, ``verify/:name[/:algorithm]`` (scopes ``hmac``,
    ``verify``) and ``config/keys`` (admin)."""
    name = _param("name")
    algorithm = _param("algorithm", schema={"type": "string", "enum": _MAC_HASHES})
    item = {"input": _B64, "reference": {"type": "string"}}
    hmac_body = {
        **item,
        "algorithm": {"type": "string", "enum": _MAC_HASHES},
        "key_version": _LENIENT_INT,
        "batch_input": {"type": "array", "items": {"type": "object", "properties": item}},
    }
    check = {
        **item,
        "hmac": {"type": "string"},
        "signature": {"type": "string"},
        "context": _B64,
    }
    verify_body = {
        **check,
        **_SIGNATURE_OPTIONS,
        "batch_input": {"type": "array", "items": {"type": "object", "properties": check}},
    }
    hmac_summary = "The HMAC (vault:vN:) of base64 input under the key's version (hmac scope)"
    verify_summary = "Whether an HMAC or signature matches base64 input (verify scope)"
    config = {
        "tags": _TAG,
        "summary": "disable_upsert: always true (sealflow never creates a key on encrypt)",
        "responses": _answers(200, 403),
        "security": _SECURITY,
    }
    config_write = {
        **config,
        "requestBody": _body({"disable_upsert": _LENIENT_BOOL}),
        "responses": _answers(200, 400, 403),
    }
    return {
        f"{mount}/hmac/{{name}}": _write(hmac_summary, hmac_body, [name]),
        f"{mount}/hmac/{{name}}/{{algorithm}}": _write(hmac_summary, hmac_body, [name, algorithm]),
        f"{mount}/verify/{{name}}": _write(verify_summary, verify_body, [name]),
        f"{mount}/verify/{{name}}/{{algorithm}}": _write(
            verify_summary, verify_body, [name, algorithm]
        ),
        f"{mount}/config/keys": {"get": config, "post": config_write, "put": config_write},
    }


def _utilities(mount: str) -> dict[str, Any]:
    """``hash[/:algorithm]`` and ``random[/:source][/:bytes]``: any valid token."""
    algorithm = {"type": "string", "enum": _HASHES}
    hashing = {"input": _B64, "algorithm": algorithm, "format": _FORMAT}
    drawing = {
        "bytes": {**_LENIENT_INT, "description": "1 to 131072; 32 if absent"},
        "format": _FORMAT,
    }
    source = _param(
        "source",
        schema={
            "type": "string",
            "description": "platform, seal or all (all os.urandom), or alone a byte count",
        },
    )
    hash_summary = "The hash of base64 input (any token), hex (default) or base64"
    random_summary = "Random bytes from os.urandom (any token), base64 (default) or hex"
    return {
        f"{mount}/hash": _write(hash_summary, hashing, []),
        f"{mount}/hash/{{algorithm}}": _write(
            hash_summary, hashing, [_param("algorithm", schema=algorithm)]
        ),
        f"{mount}/random": _write(random_summary, drawing, []),
        f"{mount}/random/{{source}}": _write(random_summary, drawing, [source]),
        f"{mount}/random/{{source}}/{{bytes}}": _write(
            random_summary, drawing, [source, _param("bytes", schema=_LENIENT_INT)]
        ),
    }


def _import(summary: str, fields: dict[str, Any]) -> dict[str, Any]:
    return {
        "tags": _TAG,
        "summary": summary,
        "parameters": [_param("name")],
        "requestBody": _body(fields),
        "responses": _answers(204, 400, 403),
        "security": _SECURITY,
    }


_DURATION = {"type": ["string", "integer"], "description": "seconds, or 90s, 30m, 1h..."}
_ACCESSOR = {"accessor": {"type": "string", "description": "tok_..."}}
_CREATE = {
    "policies": {"type": "array", "items": _STRING, "description": "sealflow scopes"},
    "ttl": _DURATION,
    "explicit_max_ttl": _DURATION,
    "renewable": _LENIENT_BOOL,
    "num_uses": _LENIENT_INT,
    "display_name": _STRING,
    "meta": {"type": "object"},
    "no_parent": _LENIENT_BOOL,
}


def _token_route(summary: str, fields: dict[str, Any], responses: dict[str, Any]) -> dict[str, Any]:
    """A token route (POST or PUT) and its body's fields."""
    operation = {
        "tags": _TAG,
        "summary": summary,
        "requestBody": _body(fields),
        "responses": responses,
        "security": _SECURITY,
    }
    return {"post": operation, "put": operation}


SECURITY_SCHEMES = {"VaultToken": {"type": "apiKey", "in": "header", "name": "X-Vault-Token"}}
