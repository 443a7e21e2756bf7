"""docker-compose.yml against the Compose Specification, and what it must wire up.

The schema check is Debian's `docker-compose config -q`, which validates against the Compose
schema it ships (no Docker engine is needed, and no schema file from outside the repository).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

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
    assert "/readyz" in " ".join(service["healthcheck"]["test"])
    assert any(volume.endswith(":/data") for volume in service["volumes"])
    assert service["environment"]["SEALFLOW_MASTER_KEY_FILE"].startswith("/run/secrets/")


def test_balancer_prometheus_and_load_profile_point_at_the_replicas() -> None:
    services = compose()["services"]
    assert services["balancer"]["depends_on"]["sealflow"]["condition"] == "service_healthy"
    nginx = (ROOT / "deploy" / "nginx.conf").read_text()
    assert "http://sealflow:8080" in nginx
    assert "proxy_request_buffering off" in nginx
    prometheus = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())
    (job,) = prometheus["scrape_configs"]
    assert job["dns_sd_configs"][0]["names"] == ["sealflow"]
    for name in ("locust-master", "locust-worker"):
        assert services[name]["profiles"] == ["load"]
        assert "/mnt/locust/locustfile.py" in services[name]["command"]
    assert "http://balancer:8080" in services["locust-master"]["command"]


def test_dockerfile_runs_as_non_root_with_a_readiness_healthcheck() -> None:
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    instructions = [line.split()[0] for line in lines if line and not line.startswith((" ", "#"))]
    assert instructions.count("FROM") == 2  # multi-stage
    assert all("trixie" in line for line in lines if line.startswith("FROM"))  # OpenSSL 3.5
    (user,) = [line for line in lines if line.startswith("USER ")]
    assert "root" not in user
    assert any(line.startswith("HEALTHCHECK") for line in lines)
    assert "/readyz" in "\n".join(lines)
    assert 'VOLUME ["/data"]' in lines
