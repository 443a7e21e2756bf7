"""The public names: ``from sealflow import Client, AsyncClient``, loaded only when asked for;
the two clients' methods side by side."""

from __future__ import annotations

import inspect
import subprocess
import sys
import typing
from typing import Any

import sealflow
import sealflow.service.client as client


def loaded_after(code: str) -> set[str]:
    probe = f"import sys\n{code}\nprint(' '.join(sorted(sys.modules)))"
    done = subprocess.run(  # noqa: S603
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    return set(done.stdout.splitlines()[-1].split())


def test_client_names_come_from_the_top_level_package() -> None:
    assert sealflow.Client is client.Client
    assert sealflow.AsyncClient is client.AsyncClient
    assert sorted(client.__all__) == client.__all__
    assert all(hasattr(client, name) for name in client.__all__)
    assert {"Client", "AsyncClient"} <= set(sealflow.__all__)


def test_import_sealflow_and_the_engine_load_no_client() -> None:
    for code in ("import sealflow", "import sealflow.engine"):
        loaded = loaded_after(code)
        assert not any(m.startswith("sealflow.service") for m in loaded), code
    assert "importlib.metadata" not in loaded_after("import sealflow")
    assert "asyncio" not in loaded_after("import sealflow")


def test_the_client_loads_nothing_of_the_server_or_keystore() -> None:
    loaded = loaded_after("from sealflow import Client")
    assert "sealflow.service.client._sync" in loaded
    assert not any(m.startswith(("sealflow.service.server", "sealflow.service.keystore",
                                 "sealflow.engine", "uvicorn", "fastapi", "pydantic"))
                   for m in loaded)  # fmt: skip


def test_the_cli_transfer_commands_load_only_the_client() -> None:
    code = "from sealflow.service.cli import main\ntry:\n    main(['encrypt', '--help'])\n"
    loaded = loaded_after(code + "except SystemExit:\n    pass")
    assert "sealflow.service.client" in loaded
    # Start-up is part of every transfer's time (docs/BENCHMARKS.md, "Client").
    heavy = ("pydantic", "sealflow.engine", "sealflow.service.keystore", "tqdm", "tempfile",
             "importlib.metadata")  # fmt: skip
    assert not any(m.startswith(heavy) for m in loaded)


# How the asyncio client's names and types read in the blocking one, as httpcore's unasync
# script maps its async code onto its sync code.
UNASYNC = {
    "AsyncClient": "Client",
    "aclose": "close",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "AsyncGenerator[bytes, None]": "Generator[bytes, None, None]",
    "Iterable[Value] | AsyncIterable[Value]": "Iterable[Value]",  # encrypt_many, decrypt_many
    "AsyncIterator[": "Iterator[",
}
DUNDERS = {"__init__", "__aenter__", "__aexit__", "__enter__", "__exit__"}


def unasync(text: str) -> str:
    for name, sync_name in UNASYNC.items():
        text = text.replace(name, sync_name)
    return text


def members(cls: type) -> dict[str, object]:
    return {k: v for k, v in vars(cls).items() if not k.startswith("_") or k in DUNDERS}


def signatures(function: Any) -> list[str]:
    """Its signature and its overloads', as text (the annotations are strings)."""
    return [str(inspect.signature(f)) for f in (*typing.get_overloads(function), function)]


def test_client_and_async_client_have_the_same_methods_and_signatures() -> None:
    blocking, in_async = members(client.Client), members(client.AsyncClient)
    assert sorted(blocking) == sorted(map(unasync, in_async))
    for name, member in in_async.items():
        twin = blocking[unasync(name)]
        if isinstance(member, property):
            assert isinstance(twin, property), name
            member, twin = member.fget, twin.fget
        assert inspect.iscoroutinefunction(twin) is False, name
        assert [unasync(s) for s in signatures(member)] == signatures(twin), name
    # Every call of AsyncClient is awaited, but the iterators, which are async iterators.
    for name in ("encrypt", "decrypt", "create_key", "list_keys", "get_key", "rotate_key",
                 "update_key", "delete_key", "export_key", "aclose"):  # fmt: skip
        assert inspect.iscoroutinefunction(in_async[name]), name
