"""The chart's ServiceMonitor and PodMonitor as the Prometheus Operator turns them into scrape configs.

No Operator runs in the tests (it would be one more controller, its CRDs and
its config reloader on a 2-core machine), so the real Prometheus of
``tests/e2e/monitoring`` is configured with what the Operator would generate
from the monitors the chart renders: the same job names, Kubernetes service
discovery roles, namespaces, ports, paths, intervals, target labels and
relabelling order (the Operator's ``generateServiceMonitorConfig`` and
``generatePodMonitorConfig``, with ``serviceDiscoveryRole: EndpointSlice``;
left out: sharding, which is a no-op with one shard, and authentication,
which the monitors do not use).

Only the fields the chart's monitors use are translated; any other field is
refused by name (``UnsupportedField``), so a monitor that grows a field fails
``tests/ship/test_monitors.py`` until this translation learns it, instead of
being scraped differently from what a user's Operator would do.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

MONITOR_KINDS = ("ServiceMonitor", "PodMonitor")
_SPEC = {
    "ServiceMonitor": {"selector", "namespaceSelector", "endpoints"},
    "PodMonitor": {"selector", "namespaceSelector", "podMetricsEndpoints"},
}
_ENDPOINT = {"port", "path", "interval", "scrapeTimeout"}
_SELECTOR = {"matchLabels", "matchExpressions"}


class UnsupportedField(ValueError):
    """A monitor field this translation does not know (so cannot scrape as the Operator would)."""


def _sanitize(name: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def _only(where: str, given: dict[str, Any], known: set[str]) -> None:
    unknown = sorted(set(given) - known)
    if unknown:
        raise UnsupportedField(f"{where}: {', '.join(unknown)} not translated")


def _selector_rules(where: str, selector: dict[str, Any], meta: str) -> list[dict[str, Any]]:
    """A label selector as keep/drop rules on ``__meta_kubernetes_<meta>_label*``."""
    _only(f"{where}.selector", selector, _SELECTOR)
    rules: list[dict[str, Any]] = []
    for key in sorted(selector.get("matchLabels") or {}):
        rules.append(
            {
                "action": "keep",
                "source_labels": [
                    f"__meta_kubernetes_{meta}_label_{_sanitize(key)}",
                    f"__meta_kubernetes_{meta}_labelpresent_{_sanitize(key)}",
                ],
                "regex": f"({selector['matchLabels'][key]});true",
            }
        )
    for expr in selector.get("matchExpressions") or []:
        key, op = _sanitize(expr["key"]), expr["operator"]
        both = [
            f"__meta_kubernetes_{meta}_label_{key}",
            f"__meta_kubernetes_{meta}_labelpresent_{key}",
        ]
        present = [f"__meta_kubernetes_{meta}_labelpresent_{key}"]
        values = "|".join(expr.get("values") or [])
        rule = {
            "In": {"action": "keep", "source_labels": both, "regex": f"({values});true"},
            "NotIn": {"action": "drop", "source_labels": both, "regex": f"({values});true"},
            "Exists": {"action": "keep", "source_labels": present, "regex": "true"},
            "DoesNotExist": {"action": "drop", "source_labels": present, "regex": "true"},
        }.get(op)
        if rule is None:
            raise UnsupportedField(f"{where}.selector: operator {op}")
        rules.append(rule)
    return rules


def _sd(role: str, monitor: dict[str, Any], kubeconfig: Path) -> list[dict[str, Any]]:
    where = f"{monitor['kind']} {monitor['metadata']['name']}"
    chosen = monitor["spec"].get("namespaceSelector") or {}
    _only(f"{where}.namespaceSelector", chosen, {"any", "matchNames"})
    sd: dict[str, Any] = {"role": role, "kubeconfig_file": str(kubeconfig)}
    if not chosen.get("any"):
        names = chosen.get("matchNames") or [monitor["metadata"]["namespace"]]
        sd["namespaces"] = {"names": list(names)}
    return [sd]


def _endpoint_settings(where: str, endpoint: dict[str, Any]) -> dict[str, Any]:
    _only(where, endpoint, _ENDPOINT)
    out: dict[str, Any] = {}
    for field, key in (
        ("interval", "scrape_interval"),
        ("scrapeTimeout", "scrape_timeout"),
        ("path", "metrics_path"),
    ):
        if endpoint.get(field):
            out[key] = endpoint[field]
    return out


_JOB_TO_TMP = {"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"}
_RUNNING = {
    "action": "drop",
    "source_labels": ["__meta_kubernetes_pod_phase"],
    "regex": "(Failed|Succeeded)",
}


def pod_monitor(monitor: dict[str, Any], kubeconfig: Path) -> list[dict[str, Any]]:
    """One scrape config per ``podMetricsEndpoints`` entry, as the Operator generates it."""
    meta, spec = monitor["metadata"], monitor["spec"]
    where = f"PodMonitor {meta['name']}"
    _only(f"{where}.spec", spec, _SPEC["PodMonitor"])
    configs = []
    for i, endpoint in enumerate(spec["podMetricsEndpoints"]):
        if not endpoint.get("port"):
            raise UnsupportedField(f"{where}: an endpoint without a port name")
        relabel = [_JOB_TO_TMP, _RUNNING]
        relabel += _selector_rules(where, spec.get("selector") or {}, "pod")
        relabel += [
            {
                "action": "keep",
                "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                "regex": endpoint["port"],
            },
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {
                "source_labels": ["__meta_kubernetes_pod_container_name"],
                "target_label": "container",
            },
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"target_label": "job", "replacement": f"{meta['namespace']}/{meta['name']}"},
            {"target_label": "endpoint", "replacement": endpoint["port"]},
        ]
        configs.append(
            {
                "job_name": f"podMonitor/{meta['namespace']}/{meta['name']}/{i}",
                "honor_labels": False,
                "kubernetes_sd_configs": _sd("pod", monitor, kubeconfig),
                **_endpoint_settings(f"{where}.podMetricsEndpoints[{i}]", endpoint),
                "relabel_configs": relabel,
            }
        )
    return configs


def service_monitor(monitor: dict[str, Any], kubeconfig: Path) -> list[dict[str, Any]]:
    """One scrape config per ``endpoints`` entry (EndpointSlice discovery), as the Operator's."""
    meta, spec = monitor["metadata"], monitor["spec"]
    where = f"ServiceMonitor {meta['name']}"
    _only(f"{where}.spec", spec, _SPEC["ServiceMonitor"])
    target = [
        "__meta_kubernetes_endpointslice_address_target_kind",
        "__meta_kubernetes_endpointslice_address_target_name",
    ]
    configs = []
    for i, endpoint in enumerate(spec["endpoints"]):
        if not endpoint.get("port"):
            raise UnsupportedField(f"{where}: an endpoint without a port name")
        relabel = [_JOB_TO_TMP]
        relabel += _selector_rules(where, spec.get("selector") or {}, "service")
        relabel += [
            {
                "action": "keep",
                "source_labels": ["__meta_kubernetes_endpointslice_port_name"],
                "regex": endpoint["port"],
            },
            {
                "source_labels": target,
                "separator": ";",
                "regex": "Node;(.*)",
                "replacement": "${1}",
                "target_label": "node",
            },
            {
                "source_labels": target,
                "separator": ";",
                "regex": "Pod;(.*)",
                "replacement": "${1}",
                "target_label": "pod",
            },
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {
                "source_labels": ["__meta_kubernetes_pod_container_name"],
                "target_label": "container",
            },
            _RUNNING,
            {
                "source_labels": ["__meta_kubernetes_service_name"],
                "target_label": "job",
                "replacement": "${1}",
            },
            {"target_label": "endpoint", "replacement": endpoint["port"]},
        ]
        configs.append(
            {
                "job_name": f"serviceMonitor/{meta['namespace']}/{meta['name']}/{i}",
                "honor_labels": False,
                "kubernetes_sd_configs": _sd("endpointslice", monitor, kubeconfig),
                **_endpoint_settings(f"{where}.endpoints[{i}]", endpoint),
                "relabel_configs": relabel,
            }
        )
    return configs


def scrape_configs(objects: Iterable[dict[str, Any]], kubeconfig: Path) -> list[dict[str, Any]]:
    """The scrape configs of every ServiceMonitor and PodMonitor among ``objects``."""
    out: list[dict[str, Any]] = []
    for obj in objects:
        if obj.get("kind") == "ServiceMonitor":
            out += service_monitor(obj, kubeconfig)
        elif obj.get("kind") == "PodMonitor":
            out += pod_monitor(obj, kubeconfig)
    return out
