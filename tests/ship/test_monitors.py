"""The scrape configs the test Prometheus runs with are the chart's monitors, translated as the Operator would.

``tests/e2e/monitoring`` configures its Prometheus with
``tests.ship.monitors.scrape_configs`` of the monitors the chart renders;
here, with helm and no cluster, the translation is held to what those
monitors say: the port names, paths, intervals and namespaces, the Operator's
job names and target labels, the pod selector of the values, and a refusal
of any field it does not translate. promtool checks the result.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from sidecar.injector.patch import PORT_NAME
from tests.cluster import binaries
from tests.ship.monitors import UnsupportedField, scrape_configs
from tests.ship.tools import find, render

pytestmark = pytest.mark.timeout(300)

ON = {
    "monitoring.serviceMonitor.enabled": True,
    "monitoring.serviceMonitor.interval": "5s",
    "monitoring.podMonitor.enabled": True,
    "monitoring.podMonitor.interval": "3s",
}


def _keeps(config: dict[str, Any]) -> dict[str, str]:
    """source labels -> regex of each keep rule."""
    return {
        ";".join(r["source_labels"]): r["regex"]
        for r in config["relabel_configs"]
        if r.get("action") == "keep"
    }


def _sets(config: dict[str, Any]) -> dict[str, str]:
    """target label -> its source label (or fixed replacement) for each plain replace rule."""
    return {
        r["target_label"]: ";".join(r.get("source_labels") or []) or r["replacement"]
        for r in config["relabel_configs"]
        if "target_label" in r and "regex" not in r and r.get("action") is None
    }


def test_the_monitors_become_the_operators_scrape_configs(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    objects = render(ON, release="e2e", namespace="grelmicro-system")
    service = find(objects, "Service")
    configs = {c["job_name"].split("/")[0]: c for c in scrape_configs(objects, kubeconfig)}
    injector, sidecars = configs.pop("serviceMonitor"), configs.pop("podMonitor")
    assert not configs

    # The injector: through its Service's endpoints, port `metrics`, in the release's namespace.
    assert (
        injector["job_name"] == "serviceMonitor/grelmicro-system/e2e-grelmicro-sidecar-injector/0"
    )
    assert injector["kubernetes_sd_configs"] == [
        {
            "role": "endpointslice",
            "kubeconfig_file": str(kubeconfig),
            "namespaces": {"names": ["grelmicro-system"]},
        }
    ]
    assert (injector["scrape_interval"], injector["metrics_path"]) == ("5s", "/metrics")
    keeps = _keeps(injector)
    assert keeps.pop("__meta_kubernetes_endpointslice_port_name") == "metrics"
    assert "metrics" in {p["name"] for p in service["spec"]["ports"]}
    selector = {
        k.removeprefix("__meta_kubernetes_service_label_").split(";")[0]: v.removesuffix(";true")
        for k, v in keeps.items()
    }
    assert selector == {
        k.replace(".", "_").replace("/", "_"): f"({v})"
        for k, v in service["spec"]["selector"].items()
    }
    assert _sets(injector)["job"] == "__meta_kubernetes_service_name"
    assert _sets(injector)["namespace"] == "__meta_kubernetes_namespace"
    assert _sets(injector)["endpoint"] == "metrics"

    # The sidecars: every namespace, pods with a container port named leader-http.
    assert sidecars["job_name"] == "podMonitor/grelmicro-system/e2e-grelmicro-sidecar-sidecars/0"
    assert sidecars["kubernetes_sd_configs"] == [
        {"role": "pod", "kubeconfig_file": str(kubeconfig)}
    ]
    assert (sidecars["scrape_interval"], sidecars["metrics_path"]) == ("3s", "/metrics")
    assert _keeps(sidecars) == {"__meta_kubernetes_pod_container_port_name": PORT_NAME}
    assert _sets(sidecars) == {
        "__tmp_prometheus_job_name": "job",
        "namespace": "__meta_kubernetes_namespace",
        "container": "__meta_kubernetes_pod_container_name",
        "pod": "__meta_kubernetes_pod_name",
        "job": "grelmicro-system/e2e-grelmicro-sidecar-sidecars",
        "endpoint": PORT_NAME,
    }
    # Neither scrapes pods that have finished (the Operator's default).
    for config in (injector, sidecars):
        assert {
            "action": "drop",
            "source_labels": ["__meta_kubernetes_pod_phase"],
            "regex": "(Failed|Succeeded)",
        } in config["relabel_configs"]

    # What Prometheus itself accepts.
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    path = tmp_path / "prometheus.yaml"
    path.write_text(yaml.safe_dump({"scrape_configs": [injector, sidecars]}))
    promtool = binaries.ensure("prometheus")["promtool"]
    checked = subprocess.run(
        [str(promtool), "check", "config", str(path)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_pod_selector_of_the_values_is_kept() -> None:
    selector = {
        "matchLabels": {"team": "a"},
        "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["web", "api"]},
            {"key": "app.kubernetes.io/name", "operator": "Exists"},
            {"key": "canary", "operator": "DoesNotExist"},
        ],
    }
    objects = render({**ON, "monitoring.podMonitor.selector": selector})
    (sidecars,) = scrape_configs([find(objects, "PodMonitor")], Path("/k"))
    rules = [r for r in sidecars["relabel_configs"] if r.get("action") in ("keep", "drop")]
    assert {
        "action": "keep",
        "source_labels": [
            "__meta_kubernetes_pod_label_team",
            "__meta_kubernetes_pod_labelpresent_team",
        ],
        "regex": "(a);true",
    } in rules
    assert {
        "action": "keep",
        "source_labels": [
            "__meta_kubernetes_pod_label_tier",
            "__meta_kubernetes_pod_labelpresent_tier",
        ],
        "regex": "(web|api);true",
    } in rules
    assert {
        "action": "keep",
        "source_labels": ["__meta_kubernetes_pod_labelpresent_app_kubernetes_io_name"],
        "regex": "true",
    } in rules
    assert {
        "action": "drop",
        "source_labels": ["__meta_kubernetes_pod_labelpresent_canary"],
        "regex": "true",
    } in rules


@pytest.mark.parametrize(
    ("kind", "path", "field"),
    [
        ("PodMonitor", ["spec", "podMetricsEndpoints", 0], "relabelings"),
        ("PodMonitor", ["spec"], "podTargetLabels"),
        ("ServiceMonitor", ["spec", "endpoints", 0], "scheme"),
        ("ServiceMonitor", ["spec"], "jobLabel"),
    ],
)
def test_a_field_the_translation_does_not_know_is_refused(
    kind: str, path: list[str | int], field: str
) -> None:
    monitor = find(render(ON), kind)
    where: Any = monitor
    for step in path:
        where = where[step]
    where[field] = "x"
    with pytest.raises(UnsupportedField, match=field):
        scrape_configs([monitor], Path("/k"))
