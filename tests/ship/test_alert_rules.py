"""The shipped alerting rules: the chart's PrometheusRule, the plain rule file, and promtool.

``manifests/prometheus-rules.yaml`` is the PrometheusRule's spec rendered with
the chart's defaults (``make manifests``); promtool checks it and runs the
rule unit tests of ``tests/ship/prometheus-rules.test.yaml`` against it. That
each alert fires and resolves on a real Prometheus scraping real pods is
``tests/e2e/monitoring``.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster import binaries
from tests.ship import render as render_module
from tests.ship.tools import MANIFESTS, find, render

pytestmark = pytest.mark.timeout(300)

RULES = MANIFESTS / "prometheus-rules.yaml"
UNIT_TESTS = Path(__file__).with_name("prometheus-rules.test.yaml")
ALERTS = {
    "GrelmicroElectionWithoutLeader",
    "GrelmicroElectionMultipleLeaders",
    "GrelmicroSidecarClockSkew",
    "GrelmicroSidecarRestarting",
    "GrelmicroSidecarLeaseRequestsFailing",
    "GrelmicroInjectorWebhookFailing",
    "GrelmicroInjectorSweepFailing",
    "GrelmicroElectionNoHealthyCandidate",
    "GrelmicroLeaderAppUnhealthy",
    "GrelmicroDrainNotAcknowledged",
}


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binaries.ensure("prometheus")["promtool"]), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _rules(groups: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in groups for r in g["rules"]}


def test_rule_file_is_the_charts_prometheus_rule_with_its_defaults() -> None:
    committed = RULES.read_text()
    assert committed == render_module.prometheus_rules_yaml(), (
        "manifests/prometheus-rules.yaml drifted from the chart: run `make manifests` and commit it"
    )
    rule = find(render({"monitoring.prometheusRule.enabled": True}), "PrometheusRule")
    assert yaml.safe_load(committed) == rule["spec"]
    assert set(_rules(rule["spec"]["groups"])) == ALERTS


def test_promtool_checks_the_rules_and_their_unit_tests_pass() -> None:
    checked = promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in checked.stdout
    tested = promtool("test", "rules", str(UNIT_TESTS))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    # Every alert has a case that expects it to fire.
    cases = yaml.safe_load(UNIT_TESTS.read_text())["tests"]
    fired = {t["alertname"] for c in cases for t in c["alert_rule_test"] if t.get("exp_alerts")}
    assert fired == ALERTS


def test_prometheus_rule_is_off_by_default_and_takes_its_values(tmp_path: Path) -> None:
    assert not [o for o in render() if o["kind"] == "PrometheusRule"]
    values = {
        "monitoring.prometheusRule.enabled": True,
        "monitoring.prometheusRule.labels": {"release": "prom"},
        "monitoring.prometheusRule.window": "30m",
        "monitoring.prometheusRule.restarts": 5,
        "monitoring.prometheusRule.for.clockSkew": "7m",
        "monitoring.prometheusRule.for.sweepFailing": "1h",
    }
    rule = find(render(values, release="r1", namespace="mon"), "PrometheusRule")
    assert rule["metadata"]["namespace"] == "mon"
    assert rule["metadata"]["labels"]["release"] == "prom"
    rules = _rules(rule["spec"]["groups"])
    assert rules["GrelmicroSidecarClockSkew"]["for"] == "7m"
    assert rules["GrelmicroInjectorSweepFailing"]["for"] == "1h"
    assert rules["GrelmicroElectionWithoutLeader"]["for"] == "1m"  # the default
    restarting = rules["GrelmicroSidecarRestarting"]
    assert "[30m]) >= 5" in restarting["expr"]
    assert "in 30m." in restarting["annotations"]["summary"]
    windows = {w for r in rules.values() for w in re.findall(r"\[(\w+)\]", r["expr"])}
    assert windows == {"30m"}
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rule["spec"]))
    checked = promtool("check", "rules", str(path))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_every_metric_a_rule_reads_is_served() -> None:
    """Sidecar and injector metrics by their /metrics; the API server's by name."""
    from tests.metrics import served_names

    served = served_names() | {"apiserver_admission_webhook_rejection_count"}
    exprs = [r["expr"] for r in _rules(yaml.safe_load(RULES.read_text())["groups"]).values()]
    for expr in exprs:
        names = set(re.findall(r"\b([a-z_]+_(?:total|status|seconds|count|healthy))\b", expr))
        assert names, expr
        assert names <= served, (expr, names - served)
