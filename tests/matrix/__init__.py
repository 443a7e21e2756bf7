"""The client and proxy matrix: real HTTP clients and real proxies against ``sealflow serve``.

It lives here, not under tests/service/server/, because it tests the whole path a byte takes
(a client library, a proxy from deploy/, the server) rather than one module of the tree.
conftest.py starts one server, the stub DNS and the proxies for the session; clients.py holds
the clients, proxies.py the proxy processes, exchange.py the inputs and the round trip.
"""
