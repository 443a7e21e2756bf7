"""API errors: one exception type, rendered as ``{"error": {"code", "message"}}``.

Messages are fixed strings or name only public things (key names, limits); they
never carry key material, tokens or request data.
"""

from __future__ import annotations

import json


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    def body(self) -> bytes:
        return json.dumps({"error": {"code": self.code, "message": self.message}}).encode()


def decryption_failed() -> ApiError:
    # One code and message for every authentication failure, whatever its cause.
    return ApiError(400, "decryption_failed", "decryption failed")


def malformed_envelope(why: str) -> ApiError:
    return ApiError(400, "malformed_envelope", why)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "bad_request", message)


def unauthorized() -> ApiError:
    return ApiError(401, "unauthorized", "a valid bearer token is required")


def forbidden(scope: str) -> ApiError:
    return ApiError(403, "forbidden", f"the token lacks the scope {scope}")


def version_retired() -> ApiError:
    return ApiError(403, "version_retired", "the key version is below min_decryption_version")


def key_not_found(name: str) -> ApiError:
    return ApiError(404, "key_not_found", f"no key named {name!r} with that version")


def timeout() -> ApiError:
    return ApiError(408, "request_timeout", "the request body was not received in time")


def too_large(limit: int) -> ApiError:
    return ApiError(413, "too_large", f"the body exceeds the limit of {limit} bytes")


def headers_too_large(limit: int) -> ApiError:
    return ApiError(431, "headers_too_large", f"request headers exceed {limit} bytes")


def overloaded() -> ApiError:
    return ApiError(503, "overloaded", "too many concurrent requests; retry later")
