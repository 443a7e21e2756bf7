"""The ``sealflow`` console script: serve, keys, tokens, encrypt, decrypt, selftest."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from typing import Any

import pydantic

from sealflow import engine

from . import _client, _logging, _manage
from ._keystore import KeyStoreError
from .config import Settings

_PREFIX = "setting_"


# uvicorn's names for the same settings, accepted too.
_ALIASES = {"max_concurrent_requests": ["--limit-concurrency"]}


def _add_settings(parser: argparse.ArgumentParser, names: list[str]) -> None:
    """One flag per setting; a flag given wins over its SEALFLOW_* variable."""
    for name in names:
        field = Settings.model_fields[name]
        parser.add_argument(
            "--" + name.replace("_", "-"),
            *_ALIASES.get(name, []),
            dest=_PREFIX + name,
            default=argparse.SUPPRESS,
            metavar=name.upper(),
            help=f"{field.description}; default {field.default} (SEALFLOW_{name.upper()})",
        )


def _selftest(_: argparse.Namespace) -> int:
    engine.self_test()
    print("self-test passed")
    print(f"context strategy: {engine.get_context_strategy().name.lower()}")
    for alg, classes in engine.provider_choice().items():
        choice = ", ".join(f"{cls}={name}" for cls, name in classes.items())
        print(f"{alg.value}: {choice}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    from ._bootstrap import prepare

    settings = Settings(**args.settings)
    _logging.configure(settings.log_level)
    token = prepare(settings)
    if token is not None:
        print(f"Root token: {token}", flush=True)
    # The app factory reads its settings from the environment, in this
    # process and in every worker process.
    for name, value in args.settings.items():
        os.environ[f"SEALFLOW_{name.upper()}"] = str(value)
    if settings.workers > 1:
        # Each worker writes its metrics here; /metrics sums them. Wiped at start
        # so counters of earlier runs do not linger (prometheus_client's rule).
        metrics_dir = settings.data_dir / "metrics"
        shutil.rmtree(metrics_dir, ignore_errors=True)
        metrics_dir.mkdir(mode=0o700)
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)

    import uvicorn

    uvicorn.run(
        "sealflow.service.app:create_app",
        factory=True,
        host=settings.host,
        port=settings.port,
        workers=settings.workers,
        http="httptools",
        loop="uvloop",
        log_config=None,
        access_log=False,  # sealflow.access logs one structured line per request
        timeout_graceful_shutdown=int(settings.shutdown_timeout) or None,
        ssl_certfile=settings.tls_cert,
        ssl_keyfile=settings.tls_key,
        server_header=False,
        # Client addresses are never used (not logged either): skip uvicorn's per-request
        # X-Forwarded-For handling.
        proxy_headers=False,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sealflow", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the HTTP service (dev defaults with no flags)")
    _add_settings(serve, list(Settings.model_fields))
    serve.set_defaults(func=_serve)
    store_flags = argparse.ArgumentParser(add_help=False)
    _add_settings(store_flags, ["data_dir", "master_key_file"])
    _manage.add_commands(commands, store_flags)
    _client.add_client_commands(commands)
    commands.add_parser(
        "selftest", help="run the engine self-test and show the provider choice"
    ).set_defaults(func=_selftest)
    args = parser.parse_args(argv)
    args.settings = {k[len(_PREFIX) :]: v for k, v in vars(args).items() if k.startswith(_PREFIX)}
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
