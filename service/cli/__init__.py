"""The ``sealflow`` console script: serve, keys, tokens, encrypt, decrypt, selftest."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import pydantic

from sealflow import engine
from sealflow.service.keystore import KeyStoreError

from . import _manage, _serve, _transfer
from ._flags import PREFIX, add_settings


def _selftest(_: argparse.Namespace) -> int:
    engine.self_test()
    print("self-test passed")
    print(f"context strategy: {engine.get_context_strategy().name.lower()}")
    for alg, classes in engine.provider_choice().items():
        choice = ", ".join(f"{cls}={name}" for cls, name in classes.items())
        print(f"{alg.value}: {choice}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sealflow", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    _serve.add_command(commands)
    store_flags = argparse.ArgumentParser(add_help=False)
    add_settings(store_flags, ["data_dir", "master_key_file"])
    _manage.add_commands(commands, store_flags)
    _transfer.add_client_commands(commands)
    commands.add_parser(
        "selftest", help="run the engine self-test and show the provider choice"
    ).set_defaults(func=_selftest)
    args = parser.parse_args(argv)
    args.settings = {k[len(PREFIX) :]: v for k, v in vars(args).items() if k.startswith(PREFIX)}
    try:
        code: int = args.func(args)
    except pydantic.ValidationError as exc:
        print(f"sealflow: invalid settings: {_first_error(exc)}", file=sys.stderr)
        return 2
    except KeyStoreError as exc:
        print(f"sealflow: {exc}", file=sys.stderr)
        return 1
    return code


def _first_error(exc: pydantic.ValidationError) -> Any:
    errors = exc.errors()
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'settings'}: {e['msg']}" for e in errors)


if __name__ == "__main__":
    sys.exit(main())
