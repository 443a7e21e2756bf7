"""deploy/grafana/sealflow.json: every panel's query parses (promtool) and selects only metrics
that a live server's /metrics serves; so do the alerting rules (docs/OPERATIONS.md)."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.deploy.promql import metric_names, promtool
from tests.deploy.test_prometheus import rules
from tests.service.conftest import start_server

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "sealflow.json"
# Grafana's variables in the queries, and the literal each is checked with.
LITERALS = {"$instance": ".*", "$__rate_interval": "5m"}
# Series Prometheus makes itself, not the service: the scrape's `up`.
SCRAPE_SERIES = {"up"}


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def queries() -> list[tuple[str, str]]:
    """(panel title and refId, query with the variables replaced by literals)."""
    found = []
    for panel in dashboard()["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for variable, literal in LITERALS.items():
                expr = expr.replace(variable, literal)
            found.append((f"{panel['title']} {target['refId']}", expr))
    return found


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[set[str]]:
    """The sample names a live server's /metrics has once a few kinds of request were made:
    labelled series appear only once counted."""
    srv = start_server(tmp_path_factory.mktemp("grafana") / "data", header_timeout=0.5)
    try:
        with srv.client() as client:
            sealed = client.post("/v1/keys/default/encrypt", content=b"x" * 100)
            assert client.post("/v1/decrypt", content=sealed.content).content == b"x" * 100
            tampered = sealed.content[:-1] + bytes([sealed.content[-1] ^ 1])
            assert client.post("/v1/decrypt", content=tampered).status_code == 400
            single = client.post("/v1/keys/default/encrypt?mode=single", content=b"y")
            assert single.status_code == 200
        assert httpx.post(f"{srv.url}/v1/decrypt", content=b"x").status_code == 401
        with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as sock:
            sock.sendall(b"GET /readyz HTTP/1.1\r\n")  # a head never finished: closed (408)
            while sock.recv(4096):
                pass
        text = httpx.get(f"{srv.url}/metrics").text
        yield {s.name for family in text_string_to_metric_families(text) for s in family.samples}
    finally:
        srv.stop()


def test_every_panel_query_parses(tmp_path: Path) -> None:
    found = queries()
    assert len(found) >= 20
    for where, expr in found:
        assert "$" not in expr, f"{where}: a variable with no literal: {expr}"
    # As recording rules, one per query: promtool parses each expression.
    group = {
        "name": "dashboard",
        "rules": [{"record": f"dashboard:query_{i}", "expr": e} for i, (_, e) in enumerate(found)],
    }
    (tmp_path / "dashboard.rules.yml").write_text(yaml.safe_dump({"groups": [group]}))
    checked = promtool("check", "rules", tmp_path / "dashboard.rules.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(found)} rules found" in checked.stdout


def test_a_broken_query_is_caught(tmp_path: Path) -> None:
    group = {"name": "d", "rules": [{"record": "d:q", "expr": "sum by (route (rate(x[5m]))"}]}
    (tmp_path / "broken.rules.yml").write_text(yaml.safe_dump({"groups": [group]}))
    assert promtool("check", "rules", tmp_path / "broken.rules.yml").returncode != 0


def test_the_dashboard_and_the_alerts_select_only_served_metrics(served: set[str]) -> None:
    panels = {name for _, expr in queries() for name in metric_names(expr)}
    alerts = {name for rule in rules() for name in metric_names(rule["expr"])}
    template = dashboard()["templating"]["list"]
    variables = {
        m for v in template if v["type"] == "query" for m in re.findall(r"\((\w+)", v["definition"])
    }
    for where, names in (("dashboard", panels), ("alerts", alerts), ("variables", variables)):
        unknown = names - served - SCRAPE_SERIES
        assert not unknown, f"{where} select metrics /metrics does not serve: {sorted(unknown)}"
    # What the dashboard is for (issue 30): each of these has a panel.
    assert panels >= {
        "sealflow_requests_total",
        "sealflow_request_duration_seconds_bucket",
        "sealflow_bytes_total",
        "sealflow_decryption_failures_total",
        "sealflow_auth_failures_total",
        "sealflow_keys_usage_max_ratio",
        "sealflow_keystore_reachable",
        "sealflow_requests_in_flight",
        "sealflow_connections_refused_total",
        "sealflow_audit_dropped_total",
    }


def test_the_name_check_can_fail(served: set[str]) -> None:
    assert metric_names('sum by (route) (rate(sealflow_requets_total{a="b"}[5m])) > 1') == {
        "sealflow_requets_total"
    }
    assert "sealflow_requets_total" not in served
    assert "sealflow_requests_total" in served


def test_panels_have_unique_ids_and_use_the_datasource_variable() -> None:
    panels = dashboard()["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    for panel in panels:
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert all(t["datasource"] == panel["datasource"] for t in panel["targets"])
