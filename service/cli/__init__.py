"""The `sealflow` console script: serve, keys, tokens, approle, audit, encrypt, decrypt,
migrate, selftest, healthcheck.

``encrypt`` and ``decrypt`` are parsed on their own and load the client library only (not
pydantic, the engine or the keystore): start-up is part of every transfer's time, a tenth of
a 200 MiB one (docs/BENCHMARKS.md, "Client"). The other commands import what they need
inside ``_main``.
"""

from __future__ import annotations

import argparse
import gc
import os
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sealflow.engine import Calibration

_PROG = "sealflow"
_DESCRIPTION = (
    "sealflow: encrypt and decrypt streamed bodies under named, versioned keys that never "
    "leave the service."
)


def _selftest(args: argparse.Namespace) -> int:
    from sealflow import engine
    from sealflow.service.config import Settings

    settings = Settings(**args.settings)
    engine.set_context_strategy(settings.context_strategy)
    engine.set_provider(None if settings.provider == "auto" else settings.provider)
    engine.self_test()
    if settings.provider == "auto":  # for the pool `sealflow serve` would run
        engine.calibrate(threads=engine.parallelism(settings.crypto_threads or None))
    print("self-test passed")
    print(f"context strategy: {engine.get_context_strategy().name.lower()}")
    for alg, classes in engine.provider_choice().items():
        choice = ", ".join(f"{cls}={name}" for cls, name in classes.items())
        print(f"{alg.value}: {choice}")
    if args.verbose:
        _print_calibration(engine.calibration())
    return 0


def _print_calibration(calibration: Calibration | None) -> None:
    from sealflow.engine import Algorithm, SizeClass

    if calibration is None:
        print("calibration: none (a provider was forced)")
        return
    threads = calibration.threads
    print(
        f"calibration for {threads} job(s) at once, {calibration.seconds * 1000:.0f} ms; "
        "MB/s on one thread / on all threads together (-: not measured, it could not win):"
    )
    choice = calibration.choice()
    rows: dict[tuple[Algorithm, SizeClass], list[str]] = {}
    for m in calibration.measurements:
        rows.setdefault((m.algorithm, m.size_class), []).append(
            f"{m.provider} {m.single / 1e6:,.0f} / "
            + ("-" if m.aggregate is None else f"{m.aggregate / 1e6:,.0f}")
        )
    for (alg, cls), figures in rows.items():
        basis = calibration.basis(cls, threads)
        print(
            f"  {alg.value} {cls.name.lower()}: {', '.join(figures)} "
            f"-> {choice[alg, cls]} (by {basis})"
        )


def _run(func: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    try:
        code = func(args)
        sys.stdout.flush()  # here, so a closed pipe is reported below and not at exit
    except BrokenPipeError:
        # `sealflow keys list | head -1`: the reader left, which is not an error to report.
        # Point stdout at /dev/null so the interpreter's own flush at exit stays quiet.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    return code


def _client_main(argv: list[str]) -> int:
    from . import _transfer

    parser = argparse.ArgumentParser(prog=_PROG, description=_DESCRIPTION)
    _transfer.add_client_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    code = _run(args.func, args)
    # The process ends now, everything closed: spare the interpreter's last collection of
    # asyncio's objects (10 ms of a 0.1 s start-and-exit, docs/BENCHMARKS.md "Client").
    gc.freeze()
    return code


def parser() -> argparse.ArgumentParser:
    """Every command's parser (``encrypt`` and ``decrypt`` are also parsed alone, faster)."""
    from . import _approle, _audit, _cert, _healthcheck, _manage, _migrate, _serve, _transfer
    from ._flags import add_settings
    from ._master import MASTER_KEY_SETTINGS

    parser = argparse.ArgumentParser(
        prog=_PROG,
        description=_DESCRIPTION,
        epilog="Every setting is a flag and a SEALFLOW_* variable; `sealflow serve --help` "
        "lists them.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    _serve.add_command(commands)
    store_flags = argparse.ArgumentParser(add_help=False)
    add_settings(
        store_flags, ["data_dir", *MASTER_KEY_SETTINGS, "keystore_url", "keystore_url_file"]
    )
    _manage.add_commands(commands, store_flags)
    _approle.add_commands(commands, store_flags)
    _cert.add_commands(commands, store_flags)
    _audit.add_commands(commands, store_flags)
    _transfer.add_client_commands(commands)
    _migrate.add_commands(commands)
    selftest = commands.add_parser(
        "selftest", help="run the engine self-test and show the provider choice"
    )
    add_settings(selftest, ["context_strategy", "provider", "crypto_threads"])
    selftest.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also print what the provider calibration measured (MB/s per provider, one "
        "thread and the crypto pool's threads together)",
    )
    selftest.set_defaults(func=_selftest)
    _healthcheck.add_command(commands)
    return parser


def _main(argv: list[str] | None) -> int:
    import pydantic

    from sealflow.service.config_file import ConfigFileError
    from sealflow.service.keystore import KeyStoreError

    from ._flags import PREFIX, settings_error

    args = parser().parse_args(argv)
    args.settings = {k[len(PREFIX) :]: v for k, v in vars(args).items() if k.startswith(PREFIX)}
    try:
        return _run(args.func, args)
    except pydantic.ValidationError as exc:
        print(f"sealflow: invalid setting {settings_error(exc)}", file=sys.stderr)
        return 2
    except ConfigFileError as exc:
        print(f"sealflow: --config {exc}", file=sys.stderr)
        return 2
    except KeyStoreError as exc:
        print(f"sealflow: {exc}", file=sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["encrypt"] or args[:1] == ["decrypt"]:
        return _client_main(args)
    return _main(argv)


if __name__ == "__main__":
    sys.exit(main())
