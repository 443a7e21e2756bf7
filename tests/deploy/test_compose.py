"""docker-compose.yml against the Compose Specification, and what it must wire up.

The schema check is Debian's `docker-compose config -q`, which validates against the Compose
schema it ships (no Docker engine is needed, and no schema file from outside the repository).
The proxy configurations in deploy/ are checked by Debian's haproxy and nginx as shipped here,
and run with real traffic by tests/matrix.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return loaded


def docker_compose_config(directory: Path) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("docker-compose")
    assert tool, "docker-compose is missing: apt-get install docker-compose (see README)"
    return subprocess.run(  # noqa: S603 (the docker-compose on PATH)
        [tool, "config", "-q"], cwd=directory, capture_output=True, text=True, check=False
    )


def test_compose_file_follows_the_compose_specification() -> None:
    result = docker_compose_config(ROOT)
    assert result.returncode == 0, result.stderr


def test_compose_validation_rejects_a_file_against_the_schema(tmp_path: Path) -> None:
    # The check above can fail: a field the schema does not allow is refused.
    broken = compose()
    broken["services"]["sealflow"]["replicas_typo"] = 2
    (tmp_path / "docker-compose.yml").write_text(yaml.safe_dump(broken))
    for needed in ("deploy", "loadtests"):
        if (ROOT / needed).exists():
            shutil.copytree(ROOT / needed, tmp_path / needed)
    result = docker_compose_config(tmp_path)
    assert result.returncode != 0
    assert "replicas_typo" in result.stderr


def test_service_is_scalable_healthchecked_and_keeps_its_keystore() -> None:
    service = compose()["services"]["sealflow"]
    # Scalable with --scale: no fixed container name and no published host port.
    assert "container_name" not in service
    assert "ports" not in service
    # /readyz on the configured port and scheme (tests/service/cli/test_healthcheck.py).
    assert service["healthcheck"]["test"] == ["CMD", "sealflow", "healthcheck"]
    # The keystore is PostgreSQL, not a volume the replicas share: they may be on any host.
    assert "volumes" not in service
    assert service["environment"]["SEALFLOW_MASTER_KEY_FILE"].startswith("/run/secrets/")
    assert service["environment"]["SEALFLOW_KEYSTORE_URL_FILE"].startswith("/run/secrets/")
    assert service["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_postgres_is_the_official_image_on_a_named_volume_with_a_healthcheck() -> None:
    spec = compose()
    postgres = spec["services"]["postgres"]
    assert postgres["image"].split(":")[0] == "postgres"
    assert "pg_isready" in postgres["healthcheck"]["test"]
    assert "pgdata:/var/lib/postgresql/data" in postgres["volumes"]
    assert "pgdata" in spec["volumes"]
    # Its password is a secret file, as the master key is, never a value in this file.
    assert postgres["environment"]["POSTGRES_PASSWORD_FILE"].startswith("/run/secrets/")
    assert "POSTGRES_PASSWORD" not in postgres["environment"]


def config_lines(name: str) -> list[str]:
    """The directives of a file in deploy/: comments and blank lines dropped, spaces squeezed."""
    lines = (ROOT / "deploy" / name).read_text().splitlines()
    return [" ".join(line.split("#")[0].split()) for line in lines if line.split("#")[0].strip()]


def test_balancer_is_haproxy_with_the_shipped_config() -> None:
    balancer = compose()["services"]["balancer"]
    assert balancer["image"].startswith("haproxy:")
    assert "./deploy/haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro" in balancer["volumes"]
    # Port 8080 on the host unless BALANCER_PORT says otherwise (CI: a free loopback port).
    assert balancer["ports"] == ["${BALANCER_PORT:-8080}:8080"]
    assert balancer["depends_on"]["sealflow"]["condition"] == "service_healthy"


def test_haproxy_balances_the_ready_replicas_with_bodies_streaming() -> None:
    config = config_lines("haproxy.cfg")
    assert "mode http" in config
    # A replica is in the rotation while its /readyz says 200, so a draining one (503 from
    # SIGTERM on) leaves at the next check, within its SEALFLOW_DRAIN_SECONDS.
    assert "option httpchk GET /readyz" in config
    assert "http-check expect status 200" in config
    (default_server,) = [line.split() for line in config if line.startswith("default-server ")]
    assert default_server[default_server.index("fall") + 1] == "1"
    interval = int(default_server[default_server.index("inter") + 1].removesuffix("s"))
    drain = int(compose()["services"]["sealflow"]["environment"]["SEALFLOW_DRAIN_SECONDS"])
    assert interval < drain
    # Every replica, through Docker's DNS, as they are scaled.
    assert "nameserver docker 127.0.0.11:53" in config
    (template,) = [line for line in config if line.startswith("server-template ")]
    assert template.split()[1:4] == ["sealflow", "10", "sealflow:8080"]
    assert {"check", "init-addr", "none"} <= set(template.split())
    assert "resolvers docker" in template
    # Full duplex, bodies never collected first, and stalls (not transfers) bounded.
    assert not any("http-buffer-request" in line for line in config)
    timeouts = {line.split()[1]: line.split()[2] for line in config if line.startswith("timeout ")}
    assert timeouts["client"] == timeouts["server"] == "300s"


def test_nginx_alternative_streams_request_bodies_and_never_asks_for_full_duplex() -> None:
    config = config_lines("nginx.conf")
    assert "proxy_request_buffering off;" in config  # plaintext bodies never go to disk
    assert "proxy_buffering off;" in config
    assert 'proxy_set_header Sealflow-Duplex "";' in config
    assert "set $sealflow http://sealflow:8080;" in config
    assert config[0].startswith("resolver 127.0.0.11 ")


def test_prometheus_and_the_load_profile_point_at_the_replicas() -> None:
    services = compose()["services"]
    prometheus = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())
    (job,) = prometheus["scrape_configs"]
    assert job["dns_sd_configs"][0]["names"] == ["sealflow"]
    assert job["dns_sd_configs"][0]["port"] == 8080
    for name in ("locust-master", "locust-worker"):
        assert services[name]["profiles"] == ["load"]
        assert "/mnt/locust/locustfile.py" in services[name]["command"]
    assert "http://balancer:8080" in services["locust-master"]["command"]


def test_the_proxy_configurations_are_accepted_by_the_proxies(tmp_path: Path) -> None:
    # Debian's haproxy and nginx check the files as shipped (tests/matrix runs them).
    haproxy = shutil.which("haproxy", path="/usr/sbin:/usr/bin")
    nginx = shutil.which("nginx", path="/usr/sbin:/usr/bin")
    assert haproxy, "haproxy is missing: apt-get install haproxy (see .ci/run)"
    assert nginx, "nginx is missing: apt-get install nginx (see .ci/run)"
    checked = subprocess.run(  # noqa: S603
        [haproxy, "-c", "-f", str(ROOT / "deploy" / "haproxy.cfg")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # The main context of the nginx image around conf.d/, with its paths in tmp_path.
    (tmp_path / "nginx.conf").write_text(
        f"pid {tmp_path}/nginx.pid;\nevents {{}}\n"
        f"http {{ client_body_temp_path {tmp_path}/body; proxy_temp_path {tmp_path}/proxy;\n"
        f"include {ROOT / 'deploy' / 'nginx.conf'}; }}\n"
    )
    checked = subprocess.run(  # noqa: S603
        [nginx, "-t", "-q", "-e", str(tmp_path / "error.log"), "-c", str(tmp_path / "nginx.conf")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stderr


def test_dockerfile_runs_as_non_root_with_a_readiness_healthcheck() -> None:
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    instructions = [line.split()[0] for line in lines if line and not line.startswith((" ", "#"))]
    assert instructions.count("FROM") == 2  # multi-stage
    assert all("trixie" in line for line in lines if line.startswith("FROM"))  # OpenSSL 3.5
    (user,) = [line for line in lines if line.startswith("USER ")]
    assert "root" not in user
    (check,) = [i for i, line in enumerate(lines) if line.startswith("HEALTHCHECK")]
    assert lines[check + 1].strip() == 'CMD ["sealflow", "healthcheck"]'  # /readyz, as served
    assert 'VOLUME ["/data"]' in lines


def resolved(directory: Path = ROOT, **env: str) -> dict[str, Any]:
    """The file as docker-compose reads it, variables substituted."""
    tool = shutil.which("docker-compose")
    assert tool, "docker-compose is missing: apt-get install docker-compose (see README)"
    done = subprocess.run(  # noqa: S603 (the docker-compose on PATH)
        [tool, "--profile", "load", "config"],
        cwd=directory,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **env},
    )
    assert done.returncode == 0, done.stderr
    loaded: dict[str, Any] = yaml.safe_load(done.stdout)
    return loaded


def test_the_replica_count_is_in_the_file_so_every_up_keeps_it() -> None:
    # `up --scale sealflow=3` then `--profile load up -d` went back to one replica: the count
    # is deploy.replicas (3, or SEALFLOW_REPLICAS), which every `up` applies.
    # (deploy/ci/run.sh checks it on a real stack.)
    assert resolved()["services"]["sealflow"]["deploy"]["replicas"] == 3
    assert resolved(SEALFLOW_REPLICAS="5")["services"]["sealflow"]["deploy"]["replicas"] == 5
    workers = resolved()["services"]["locust-worker"]["deploy"]["replicas"]
    assert workers == 2


def test_published_ports_can_be_moved_to_loopback() -> None:
    services = resolved(
        BALANCER_PORT="127.0.0.1:18080", PROMETHEUS_PORT="127.0.0.1:", LOCUST_PORT="18089"
    )["services"]
    assert services["balancer"]["ports"] == ["127.0.0.1:18080:8080/tcp"]
    assert services["prometheus"]["ports"] == ["127.0.0.1::9090/tcp"]
    assert services["locust-master"]["ports"] == [{"published": 18089, "target": 8089}]


@pytest.mark.parametrize(
    "path", ["deploy/master.key", "master.key", ".env", "deploy/tls/server.key", ".venv/bin/x"]
)
def test_keys_and_local_environments_stay_out_of_git_and_the_build_context(path: str) -> None:
    ignored = subprocess.run(  # noqa: S603
        ["git", "check-ignore", "--no-index", "-q", path],  # noqa: S607
        cwd=ROOT,
        check=False,
    )
    assert ignored.returncode == 0, f"{path} is not git-ignored"
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    # Docker's rules: a folder excludes what is in it; "**/" matches any folders, or none.
    forms = {f for p in patterns for f in (p.rstrip("/"), p.rstrip("/").removeprefix("**/"))}
    assert any(fnmatch.fnmatch(path, f) or fnmatch.fnmatch(path, f + "/*") for f in forms), (
        f"{path} would be sent to the Docker daemon in the build context"
    )
