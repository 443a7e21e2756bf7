"""The public names: ``from sealflow import Client, AsyncClient``, loaded only when asked for."""

from __future__ import annotations

import subprocess
import sys

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
        assert "h11" not in loaded, code
        assert not any(m.startswith("sealflow.service") for m in loaded), code
    assert "importlib.metadata" not in loaded_after("import sealflow")
    assert "asyncio" not in loaded_after("import sealflow")


def test_the_client_loads_nothing_of_the_server_or_keystore() -> None:
    loaded = loaded_after("from sealflow import Client")
    assert "h11" in loaded
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
