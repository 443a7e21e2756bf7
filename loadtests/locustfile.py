"""sealflow under load: encrypt-then-decrypt round trips, every plaintext checked byte for byte.

Users create nothing: the key and the token come from the environment
(``SEALFLOW_LOAD_KEY``, default ``default``; ``SEALFLOW_TOKEN``, required; the
token needs ``encrypt`` and ``decrypt`` on the key). The mix, by weight: 70 %
1 KiB single-shot, 25 % 64 KiB stream, 5 % 4 MiB stream, half of each with an
``X-AAD``. A wrong answer, a wrong status or a short body is a Locust failure
with the reason; a decrypt is sent only for an envelope that arrived whole (a reply cut off
mid-body is the encrypt's failure, never a second one of the decrypt).

``FastHttpUser`` (geventhttpclient): several times the requests per second of
``HttpUser`` from one load-generator core, and it sends a bytes body in one
write. Like every client that sends the whole body before reading, it relies on
the socket buffers to hold a stream reply that starts before the upload ends;
4 MiB fits in loopback and LAN buffers (docs/LOADTEST.md).
"""

from __future__ import annotations

import base64
import os
import random
from typing import Any

from locust import FastHttpUser, task

KEY = os.environ.get("SEALFLOW_LOAD_KEY", "default")
TOKEN = os.environ.get("SEALFLOW_TOKEN", "")
# Payloads are drawn once per size: the check compares bytes, not random streams.
PAYLOADS = {size: os.urandom(size) for size in (1024, 64 * 1024, 4 * 1024 * 1024)}


def whole_body(reply: Any) -> bytes | None:
    """The reply's body if all of it arrived, else None: no error while it was read, and as
    many bytes as its Content-Length says (every reply of the default transport has one).
    A reply cut off mid-body keeps its 200 status, and Locust can hand over what arrived."""
    if reply.request_meta.get("exception") is not None or getattr(reply, "error", None):
        return None
    try:
        body = reply.content
    except Exception:
        return None
    length = reply.headers.get("Content-Length")
    if body is None or length is None or not length.isdigit() or int(length) != len(body):
        return None
    return bytes(body)


class RoundTrip(FastHttpUser):
    # Streams of 4 MiB can take a while under load; the server's own deadline is 30 s.
    network_timeout = 60.0
    connection_timeout = 10.0

    def on_start(self) -> None:
        if not TOKEN:
            raise RuntimeError("set SEALFLOW_TOKEN to a token with encrypt and decrypt scopes")
        self.auth = {"Authorization": f"Bearer {TOKEN}"}

    def round_trip(self, size: int, mode: str) -> None:
        data = PAYLOADS[size]
        headers = dict(self.auth)
        aad = random.random() < 0.5  # noqa: S311 (a load mix, not a secret)
        if aad:
            headers["X-AAD"] = base64.b64encode(b"load-%d" % size).decode()
        label = f"{mode} {size // 1024} KiB{' aad' if aad else ''}"
        with self.client.post(
            f"/v1/keys/{KEY}/encrypt?mode={mode}",
            data=data,
            headers=headers,
            name=f"encrypt {label}",
            catch_response=True,
        ) as sealed:
            if sealed.status_code != 200:
                sealed.failure(f"encrypt: HTTP {sealed.status_code}: {(sealed.text or '')[:200]}")
                return
            envelope = whole_body(sealed)
            if envelope is None:
                sealed.failure("encrypt: the reply was cut off (no decrypt sent)")
                return
            if envelope[:4] != b"SFL1":
                sealed.failure("encrypt: the reply is not a sealflow envelope")
                return
        with self.client.post(
            "/v1/decrypt", data=envelope, headers=headers, name=f"decrypt {label}",
            catch_response=True,
        ) as opened:  # fmt: skip
            if opened.status_code != 200:
                opened.failure(f"decrypt: HTTP {opened.status_code}: {(opened.text or '')[:200]}")
                return
            plain = whole_body(opened)
            if plain is None:
                opened.failure("decrypt: the reply was cut off")
            elif plain != data:
                opened.failure(f"decrypt: plaintext differs ({len(plain)} bytes, {size} sent)")

    @task(70)
    def small_single(self) -> None:
        self.round_trip(1024, "single")

    @task(25)
    def medium_stream(self) -> None:
        self.round_trip(64 * 1024, "stream")

    @task(5)
    def large_stream(self) -> None:
        self.round_trip(4 * 1024 * 1024, "stream")
