"""sealflow's service: the HTTP server, the keystore, the client and the CLI.

Layers (checked by import-linter, see pyproject.toml and docs/SERVICE.md):
``cli`` -> ``server`` -> ``keystore`` -> ``envelope`` / ``config``; ``client`` stands alone.
This package imports nothing itself, so ``sealflow keys ...`` loads no server module.
"""
