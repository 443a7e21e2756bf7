"""The client side: a full-duplex HTTP exchange with the service (asyncio + h11).

It imports nothing of the server or the keystore: it is what an application (or the CLI)
runs on the other end of the wire.
"""

from ._duplex import CHUNK, ClientError, Sink, exchange

__all__ = ["CHUNK", "ClientError", "Sink", "exchange"]
