"""Renders manifests/install.yaml and manifests/prometheus-rules.yaml (and copies the Grafana dashboard) from the chart: ``python -m tests.ship.render`` (``make manifests``).

install.yaml is the chart with its default values, in namespace
``grelmicro-system``, without the `helm test` hook. It holds no key: the
injector makes its own CA and certificate in the cluster it runs in (the chart
renders nothing random), so one file serves every cluster.
``tests/ship/test_chart.py`` fails when the file drifts from the chart.

prometheus-rules.yaml is the spec of the chart's PrometheusRule
(``monitoring.prometheusRule``) with its default values, comments included: a
rule file for a Prometheus without the Operator (``rule_files``).
``tests/ship/test_alert_rules.py`` fails when it drifts.
"""

from __future__ import annotations

import sys

from tests.ship.tools import CHART, MANIFESTS, NAMESPACE, template

VALUES: dict[str, object] = {}

HEADER = f"""\
# grelmicro-sidecar injector: plain manifests, rendered from charts/grelmicro-sidecar
# with its default values (the injector makes and renews its own TLS certificate).
# Do not edit: regenerate with `make manifests`. Install:
#   kubectl apply -f manifests/install.yaml
#   kubectl create rolebinding grelmicro-sidecar -n <namespace> \
#     --clusterrole=grelmicro-sidecar-leases --serviceaccount=<namespace>:default
---
apiVersion: v1
kind: Namespace
metadata:
  name: {NAMESPACE}
  labels:
    app.kubernetes.io/name: grelmicro-sidecar
    app.kubernetes.io/part-of: grelmicro-sidecar
"""


def install_yaml() -> str:
    rendered = template(VALUES, skip_tests=True).stdout
    return HEADER + rendered


RULES_HEADER = """\
# grelmicro-sidecar alerting rules: a Prometheus rule file (rule_files), the spec of
# the chart's PrometheusRule (monitoring.prometheusRule.enabled=true) with its
# default values. Do not edit: regenerate with `make manifests`. docs/monitoring.md, "Alerts".
"""


def prometheus_rules_yaml() -> str:
    rendered = template(
        {"monitoring.prometheusRule.enabled": True},
        show_only="templates/prometheusrule.yaml",
    ).stdout
    spec = rendered.split("\nspec:\n", 1)[1]
    return RULES_HEADER + "".join(line.removeprefix("  ") for line in spec.splitlines(True))


def main() -> int:
    path = MANIFESTS / "install.yaml"
    path.write_text(install_yaml())
    print(f"wrote {path.relative_to(MANIFESTS.parent)}")
    rules = MANIFESTS / "prometheus-rules.yaml"
    rules.write_text(prometheus_rules_yaml())
    print(f"wrote {rules.relative_to(MANIFESTS.parent)}")
    # The chart's Grafana dashboard, for users who import it by hand.
    dashboard = MANIFESTS / "grafana-dashboard.json"
    dashboard.write_text((CHART / "dashboards" / "grelmicro-sidecar.json").read_text())
    print(f"wrote {dashboard.relative_to(MANIFESTS.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
