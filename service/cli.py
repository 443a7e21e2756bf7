"""The ``sealflow`` console script.

For now it exposes the engine: ``sealflow selftest`` runs the power-on
self-test and prints the provider chosen per algorithm and size class.
``sealflow serve`` (the HTTP service) arrives with the service issue.
"""

from __future__ import annotations

import argparse
import sys

import engine


def _selftest(_: argparse.Namespace) -> int:
    engine.self_test()
    print("self-test passed")
    print(f"context strategy: {engine.get_context_strategy().name.lower()}")
    for alg, classes in engine.provider_choice().items():
        choice = ", ".join(f"{cls}={name}" for cls, name in classes.items())
        print(f"{alg.value}: {choice}")
    return 0


def _serve(_: argparse.Namespace) -> int:
    print(
        "sealflow serve: the HTTP service is not built yet (see the service issue)", file=sys.stderr
    )
    return 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sealflow", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser(
        "selftest", help="run the engine self-test and show the provider choice"
    ).set_defaults(func=_selftest)
    commands.add_parser("serve", help="run the HTTP service (not built yet)").set_defaults(
        func=_serve
    )
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
