"""The transit master-key provider in the hierarchy, against an OpenBao of the test's own:
serve and restart with the KEK sealed by a Transit key, OpenBao stopped while serving changes
nothing on the request path, and OpenBao down at start-up stops the start in one line."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from tests.service.conftest import SEALFLOW, Server
from tests.service.openbao import run_openbao, seal_key

from .restart import restarted, seal, unseal

SECRET = b"sealed under a KEK that another Transit wraps"


def test_serve_restart_and_openbao_going_away(
    tmp_path: Path, make_server: Callable[..., Server]
) -> None:
    with run_openbao(tmp_path) as bao:
        sealing = seal_key(bao.url, bao.token, tmp_path)
        settings = {"master_key_provider": "transit", **sealing.settings(bao.url)}
        first = make_server(**settings)
        data = first.data_dir
        envelope = seal(first, SECRET)
        first.stop()
        assert not (data / "master.key").exists()
        with restarted(first, data, **settings) as again:
            assert unseal(again, envelope) == SECRET
            bao.stop()
            # The request path never asks OpenBao: using and making key material goes on.
            with again.client() as client:
                assert client.post("/v1/decrypt", content=envelope).content == SECRET
                assert client.post("/v1/keys/default/rotate").status_code == 200
                newer = client.post("/v1/keys/default/encrypt", content=SECRET).content
                assert client.post("/v1/decrypt", content=newer).content == SECRET
    env = {
        **os.environ,
        "SEALFLOW_DATA_DIR": str(data),
        **{f"SEALFLOW_{k.upper()}": str(v) for k, v in settings.items()},
    }
    started = subprocess.run(  # noqa: S603
        [SEALFLOW, "serve", "--port", "0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert started.returncode == 1
    assert started.stderr.splitlines() == [
        f"sealflow: transit master key transit/{sealing.key} at {bao.url}: cannot reach it:"
        " Connection refused"
    ]
    assert sealing.token not in started.stderr
