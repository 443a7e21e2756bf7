"""sealflow's HTTP service: FastAPI app, data path, keystore, auth, metrics, CLI.

``service.app:create_app`` is the ASGI factory; ``service.cli:main`` the console script.
"""
