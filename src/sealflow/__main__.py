"""``python -m sealflow`` runs the ``sealflow`` console script."""

from sealflow.service.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
