"""``sealflow healthcheck`` (the image's HEALTHCHECK): /readyz on the port and scheme the
service was configured with, whichever way it was configured."""

from __future__ import annotations

from pathlib import Path

from tests.service.cli.test_cli import run
from tests.service.conftest import Server, free_port


def test_it_finds_an_http_server_by_its_port_variable_flag_or_file(
    server: Server, tmp_path: Path
) -> None:
    assert run("healthcheck", SEALFLOW_PORT=str(server.port)).returncode == 0
    assert run("healthcheck", "--port", str(server.port)).returncode == 0
    (tmp_path / "sealflow.toml").write_text(f'port = {server.port}\nhost = "0.0.0.0"\n')
    done = run("healthcheck", "--config", "sealflow.toml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr


def test_it_fails_where_nothing_listens() -> None:
    port = free_port()
    done = run("healthcheck", SEALFLOW_PORT=str(port))
    assert done.returncode == 1
    assert f"http://127.0.0.1:{port}/readyz" in done.stderr.decode()


def test_it_speaks_https_to_a_tls_server(tls_server: Server) -> None:
    assert tls_server.cert is not None
    done = run(
        "healthcheck",
        SEALFLOW_PORT=str(tls_server.port),
        SEALFLOW_TLS_CERT=tls_server.env["SEALFLOW_TLS_CERT"],
        SEALFLOW_TLS_KEY=tls_server.env["SEALFLOW_TLS_KEY"],
    )
    assert done.returncode == 0, done.stderr
    # Plain HTTP to the TLS port gets no answer: the scheme comes from the settings.
    plain = run("healthcheck", SEALFLOW_PORT=str(tls_server.port))
    assert plain.returncode == 1
    assert f"http://127.0.0.1:{tls_server.port}/readyz" in plain.stderr.decode()
