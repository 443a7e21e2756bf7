"""The HTTP server: the ASGI app (``app.create_app``), its front door, the data and admin
routes, and what runs beside them (startup, drain, watchdog, memory budget, metrics, logs).

Nothing outside this package imports it but the ``serve`` command.
"""
