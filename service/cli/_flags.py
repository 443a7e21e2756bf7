"""Settings as command-line flags: one flag per ``Settings`` field, winning over its variable."""

from __future__ import annotations

import argparse
import typing
from pathlib import Path

import pydantic

from sealflow.service.config import Settings

PREFIX = "setting_"

# uvicorn's names for the same settings, accepted too.
_ALIASES = {"max_concurrent_requests": ["--limit-concurrency"]}
# What a value is, in words (argparse would show the field name in capitals).
_METAVARS: dict[object, str] = {
    int: "N",
    float: "SECONDS",
    str: "TEXT",
    Path: "PATH",
    pydantic.SecretStr: "SECRET",
}
_NAMED = {
    "host": "ADDRESS",
    "port": "PORT",
    "max_single_bytes": "BYTES",
    "max_buffered_bytes": "BYTES",
    "max_header_bytes": "BYTES",
    "max_json_bytes": "BYTES",
    "keystore_url": "URL",
    "master_key_pkcs11_token_label": "LABEL",
    "master_key_pkcs11_key_label": "LABEL",
    "trusted_proxies": "ADDRESSES",
    "token_default_ttl": "DURATION",
    "token_max_ttl": "DURATION",
}


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def variable(name: str) -> str:
    return "SEALFLOW_" + name.upper()


def _value_type(annotation: object) -> object:
    # `Path | None` -> Path
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    return args[0] if typing.get_origin(annotation) is not typing.Literal and args else annotation


def add_settings(parser: argparse.ArgumentParser, names: list[str]) -> None:
    """One flag per setting; a flag given wins over its SEALFLOW_* variable."""
    for name in names:
        field = Settings.model_fields[name]
        kind = _value_type(field.annotation)
        choices = typing.get_args(kind) if typing.get_origin(kind) is typing.Literal else None
        default = "" if field.default is None else f"default {field.default}; "
        parser.add_argument(
            flag(name),
            *_ALIASES.get(name, []),
            dest=PREFIX + name,
            default=argparse.SUPPRESS,
            choices=choices,
            metavar=None if choices else _NAMED.get(name, _METAVARS.get(kind, "VALUE")),
            help=f"{field.description} ({default}{variable(name)})",
        )


def settings_error(exc: pydantic.ValidationError) -> str:
    """One line naming each bad setting by its flag and variable, as argparse names a flag."""
    parts = []
    for error in exc.errors():
        loc = error["loc"]
        where = f"{flag(str(loc[0]))} / {variable(str(loc[0]))}: " if loc else ""
        # A validator's own message, without pydantic's "Value error, " in front.
        cause = error.get("ctx", {}).get("error")
        parts.append(where + (str(cause) if isinstance(cause, ValueError) else error["msg"]))
    return "; ".join(parts)
