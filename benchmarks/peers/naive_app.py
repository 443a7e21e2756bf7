"""The peer: the plain FastAPI + cryptography service a user would write instead of sealflow.

Reads the whole body (``await request.body()``), one ``AESGCM`` call, returns
nonce || ciphertext || tag; decrypt likewise. No auth, no metrics, no logs: the
most favourable version of the alternative.

    taskset -c 0 uvicorn benchmarks.peers.naive_app:app --port 8081 --no-access-log
"""

from __future__ import annotations

import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from fastapi import FastAPI, Request, Response

KEY = os.urandom(32)
aead = AESGCM(KEY)
app = FastAPI()


@app.post("/encrypt")
async def encrypt(request: Request) -> Response:
    nonce = os.urandom(12)
    body = await request.body()
    return Response(nonce + aead.encrypt(nonce, body, None), media_type="application/octet-stream")


@app.post("/decrypt")
async def decrypt(request: Request) -> Response:
    body = await request.body()
    try:
        plaintext = aead.decrypt(body[:12], body[12:], None)
    except InvalidTag:
        return Response(b"decryption failed", status_code=400)
    return Response(plaintext, media_type="application/octet-stream")
