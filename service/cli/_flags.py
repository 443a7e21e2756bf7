"""Settings as command-line flags: one flag per ``Settings`` field, winning over its variable."""

from __future__ import annotations

import argparse

from sealflow.service.config import Settings

PREFIX = "setting_"


# uvicorn's names for the same settings, accepted too.
_ALIASES = {"max_concurrent_requests": ["--limit-concurrency"]}


def add_settings(parser: argparse.ArgumentParser, names: list[str]) -> None:
    """One flag per setting; a flag given wins over its SEALFLOW_* variable."""
    for name in names:
        field = Settings.model_fields[name]
        parser.add_argument(
            "--" + name.replace("_", "-"),
            *_ALIASES.get(name, []),
            dest=PREFIX + name,
            default=argparse.SUPPRESS,
            metavar=name.upper(),
            help=f"{field.description}; default {field.default} (SEALFLOW_{name.upper()})",
        )
