"""deploy/prometheus/alerts.yml and deploy/prometheus.yml, checked by promtool (docs/OPERATIONS.md).

``promtool test rules`` runs deploy/prometheus/alerts.test.yml, where each alert fires for one
replica and stays silent for another; the metric names the rules select are checked against a
live server's /metrics in test_grafana.py, with the dashboard's.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.promql import metric_names, promtool

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
ALERT_TESTS = ROOT / "deploy" / "prometheus" / "alerts.test.yml"


def rules() -> list[dict[str, Any]]:
    loaded = yaml.safe_load(ALERTS.read_text())
    return [rule for group in loaded["groups"] for rule in group["rules"]]


def test_the_rules_are_valid() -> None:
    checked = promtool("check", "rules", ALERTS)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(rules())} rules found" in checked.stdout


def test_the_prometheus_config_is_valid_and_loads_the_rules() -> None:
    checked = promtool("check", "config", ROOT / "deploy" / "prometheus.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 1 rule files found" in checked.stdout
    assert "alerts.yml" in checked.stdout


def test_the_alerts_unit_tests_pass() -> None:
    tested = promtool("test", "rules", ALERT_TESTS)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_alert_is_tested_firing_and_silent() -> None:
    tests = yaml.safe_load(ALERT_TESTS.read_text())["tests"]
    cases = [case for test in tests for case in test["alert_rule_test"]]
    names = {rule["alert"] for rule in rules()}
    assert names >= {
        "SealflowReplicaDown",
        "SealflowKeystoreUnreachable",
        "SealflowDecryptionFailureSpike",
        "SealflowKeyNearUsageLimit",
        "SealflowHighLatency",
    }
    for name in names:
        outcomes = [bool(c["exp_alerts"]) for c in cases if c["alertname"] == name]
        assert True in outcomes, f"{name} is never shown firing"
        assert False in outcomes, f"{name} is never shown silent"
    for rule in rules():
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
        assert metric_names(rule["expr"]), rule["alert"]


def test_the_unit_tests_fail_when_a_rule_stops_firing(tmp_path: Path) -> None:
    # The tests can fail: a threshold raised out of reach makes the firing case fail.
    shutil.copy(ALERT_TESTS, tmp_path / "alerts.test.yml")
    text = ALERTS.read_text()
    spike = "sum by (instance) (rate(sealflow_decryption_failures_total[5m])) > 1"
    assert spike in text
    (tmp_path / "alerts.yml").write_text(text.replace(spike, spike + "000"))
    tested = promtool("test", "rules", tmp_path / "alerts.test.yml")
    assert tested.returncode != 0
    assert "SealflowDecryptionFailureSpike" in tested.stdout + tested.stderr
