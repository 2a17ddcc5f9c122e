"""The chart, rendered by the real helm (no cluster): lint, schema, conventions, drift.

Drift checks tie the chart to the code it deploys: the webhook configuration
equals ``sidecar.injector.webhookconfig``'s, the Deployment's env parses with
the injector's own settings parser into the values given, the workload Role
equals ``manifests/rbac.yaml`` and the injector's autoRBAC Role, and
``manifests/install.yaml`` equals a fresh render.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from sidecar.injector import rbac as injector_rbac
from sidecar.injector.settings import build_parser, env_name, injector_settings
from sidecar.injector.webhookconfig import webhook_configuration
from tests.ship import render as render_module
from tests.ship.tools import CHART, MANIFESTS, docs, find, helm, is_hook, render, template

pytestmark = pytest.mark.timeout(120)

VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "cert-manager": {"tls.certManager.enabled": True},
    "cert-manager-issuer": {
        "tls.certManager.enabled": True,
        "tls.certManager.issuerRef": {"name": "corp-ca", "kind": "ClusterIssuer"},
    },
    "external-url": {"webhook.url": "https://127.0.0.1:9443/inject"},
    "auto-rbac-and-workload-rbac": {
        "injector.autoRBAC": True,
        "workloadRBAC": [
            {"namespace": "team-a"},
            {"namespace": "team-b", "serviceAccounts": ["a", "b"], "leaderLabel": True},
        ],
    },
    "one-replica-no-pdb": {"injector.replicas": 1, "injector.podDisruptionBudget.enabled": False},
    "monitoring-and-network-policy": {
        "monitoring.serviceMonitor.enabled": True,
        "monitoring.podMonitor.enabled": True,
        "monitoring.dashboard.enabled": True,
        "monitoring.prometheusRule.enabled": True,
        "networkPolicy.enabled": True,
    },
}


@pytest.mark.parametrize("name", list(VALUE_SETS))
def test_helm_lint_is_clean(name: str) -> None:
    from tests.ship.tools import set_args

    result = helm("lint", "--strict", str(CHART), *set_args(VALUE_SETS[name]), check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout
    # --strict turns warnings into failures; only the icon recommendation remains.
    notes = [line for line in result.stdout.splitlines() if line.startswith("[")]
    assert notes == ["[INFO] Chart.yaml: icon is recommended"], notes


BAD_VALUES = [
    ({"injector.replicas": 0}, "at '/injector/replicas': minimum: got 0, want 1"),
    ({"injector.replicas": "two"}, "at '/injector/replicas'"),
    (
        {"sidecar.leaseDuration": "soon"},
        "at '/sidecar/leaseDuration': 'soon' does not match pattern",
    ),
    (
        {"sidecar.resources.limits": {"memory": "64Mi", "cpu": "1"}},
        "at '/sidecar/resources/limits': additional properties 'cpu' not allowed",
    ),
    ({"sidecar.resources.requests.memory": "lots"}, "at '/sidecar/resources/requests/memory'"),
    ({"webhook.url": "http://127.0.0.1:8443/inject"}, "at '/webhook/url'"),
    ({"webhook.excludedNamespaces": ["Not_A_Namespace"]}, "at '/webhook/excludedNamespaces/0'"),
    ({"injector.logLevel": "loud"}, "at '/injector/logLevel'"),
    ({"image.pullPolicy": "Sometimes"}, "at '/image/pullPolicy'"),
    ({"typo": True}, "additional properties 'typo' not allowed"),
    ({"injector.autoRbac": True}, "additional properties 'autoRbac' not allowed"),
    (
        {"tls.certManager.issuerRef": {"name": "x", "kind": "Secret"}},
        "at '/tls/certManager/issuerRef/kind'",
    ),
    ({"workloadRBAC": [{"serviceAccounts": ["default"]}]}, "missing property 'namespace'"),
    # Prometheus durations have no fractions; `for` names each alert.
    ({"monitoring.prometheusRule.window": "1.5m"}, "at '/monitoring/prometheusRule/window'"),
    (
        {"monitoring.prometheusRule.for.clockSkew": "soon"},
        "at '/monitoring/prometheusRule/for/clockSkew'",
    ),
    ({"monitoring.prometheusRule.restarts": 0}, "at '/monitoring/prometheusRule/restarts'"),
    (
        {"monitoring.prometheusRule.for.clockDrift": "1m"},
        "additional properties 'clockDrift' not allowed",
    ),
]


@pytest.mark.parametrize(("values", "message"), BAD_VALUES, ids=[str(v) for v, _ in BAD_VALUES])
def test_schema_rejects_bad_values_naming_them(values: dict[str, Any], message: str) -> None:
    result = template(values, check=False)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr
    assert message in result.stderr, result.stderr


BAD_RULES = [
    (
        {"sidecar.renewDeadline": "20s"},
        "sidecar.leaseDuration (15s) must be greater than sidecar.renewDeadline (20s)",
    ),
    (
        {"sidecar.retryPeriod": "9s"},
        "sidecar.renewDeadline (10s) must be greater than 1.2 × sidecar.retryPeriod (9s)",
    ),
    (
        {"sidecar.leaseDuration": "15500ms"},
        "sidecar.leaseDuration (15500ms) must be a whole number of seconds",
    ),
    ({"sidecar.retryPeriod": "0s"}, "sidecar.retryPeriod (0s) must be greater than 0"),
    ({"test.namespace": "kube-system"}, "test.namespace (kube-system) is excluded from injection"),
    (
        {"webhook.caBundle": "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n"},
        "webhook.caBundle is only used with webhook.url and tls.certManager.enabled",
    ),
    # An image no node can pull (Docker Hub's official namespace, where it is never published)
    # is refused at render, naming the value to set (the old default ended in ImagePullBackOff).
    (
        {"image.repository": "grelmicro-sidecar"},
        'image.repository "grelmicro-sidecar" names no registry, so nodes would look for '
        "docker.io/library/grelmicro-sidecar, which does not exist; set image.repository to "
        "the image's path in a registry your nodes pull from, such as "
        "ghcr.io/grelinfo/grelmicro-sidecar (where releases are published)",
    ),
    (
        {"sidecar.image.repository": "sidecar"},
        'sidecar.image.repository "sidecar" names no registry',
    ),
]


def test_the_image_is_the_published_one_pinned_by_digest_when_given() -> None:
    digest = "sha256:" + "ab" * 32
    for values, expected in (
        (None, "ghcr.io/grelinfo/grelmicro-sidecar:0.1.0"),
        ({"image.digest": digest}, f"ghcr.io/grelinfo/grelmicro-sidecar:0.1.0@{digest}"),
        (
            {"image.repository": "registry.corp:5000/mirror/grelmicro-sidecar", "image.tag": "x"},
            "registry.corp:5000/mirror/grelmicro-sidecar:x",
        ),
    ):
        objects = render(values)
        container = find(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]
        assert container["image"] == expected
        assert _injector_env(objects)["GRELMICRO_INJECTOR_SIDECAR_IMAGE"] == expected
    # A sidecar image of its own takes no digest meant for another.
    own = _injector_env(render({"image.digest": digest, "sidecar.image.tag": "9.9.9"}))
    assert own["GRELMICRO_INJECTOR_SIDECAR_IMAGE"] == "ghcr.io/grelinfo/grelmicro-sidecar:9.9.9"


@pytest.mark.parametrize(("values", "message"), BAD_RULES, ids=[str(v) for v, _ in BAD_RULES])
def test_rules_between_values_are_refused_with_a_clear_message(
    values: dict[str, Any], message: str
) -> None:
    result = template(values, check=False)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


def test_timing_rules_accept_valid_mixed_units() -> None:
    env = _injector_env(
        render(
            {
                "sidecar.leaseDuration": "1m",
                "sidecar.renewDeadline": "40500ms",
                "sidecar.retryPeriod": "1s",
            }
        )
    )
    assert env["GRELMICRO_INJECTOR_LEASE_DURATION"] == "1m"
    result = template(
        {
            "sidecar.leaseDuration": "1m",
            "sidecar.renewDeadline": "40s",
            "sidecar.retryPeriod": "1m0.5s",
        },
        check=False,
    )
    assert result.returncode != 0
    assert "must be greater than 1.2 × sidecar.retryPeriod (1m0.5s)" in result.stderr


# ---- conventions -------------------------------------------------------------

STANDARD_LABELS = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/part-of",
    "app.kubernetes.io/component",
    "helm.sh/chart",
)
CLUSTER_SCOPED = {
    "ClusterRole",
    "ClusterRoleBinding",
    "MutatingWebhookConfiguration",
    "Namespace",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}


@pytest.mark.parametrize("name", list(VALUE_SETS))
def test_every_object_is_labelled_and_namespaced_by_the_release(name: str) -> None:
    objects = render(VALUE_SETS[name], release="rel", namespace="some-ns")
    assert objects
    for obj in objects:
        meta = obj["metadata"]
        what = f"{obj['kind']}/{meta['name']}"
        for label in STANDARD_LABELS:
            assert label in (meta.get("labels") or {}), f"{what} lacks label {label}"
        assert meta["labels"]["app.kubernetes.io/instance"] == "rel"
        if obj["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in meta, what
        elif meta["labels"]["app.kubernetes.io/component"] == "sidecar-rbac":
            assert meta["namespace"] in ("team-a", "team-b"), what  # workloadRBAC's own namespaces
        elif obj["kind"] in ("Role", "RoleBinding") and is_hook(obj):
            assert meta["namespace"] == "rel-grelmicro-sidecar-test", what  # helm test's namespace
        else:
            assert meta["namespace"] == "some-ns", what


def test_templates_hard_code_no_namespace() -> None:
    for path in sorted((CHART / "templates").rglob("*.yaml")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            stripped = line.strip()
            if stripped.startswith("namespace:"):
                assert "{{" in stripped, f"{path.name}:{number} hard-codes {stripped!r}"


def _restricted(container: dict[str, Any], pod: dict[str, Any]) -> None:
    sc = container["securityContext"]
    psc = pod.get("securityContext", {})
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is True
    assert int(sc.get("runAsUser", psc.get("runAsUser", 0))) > 0
    assert (sc.get("seccompProfile") or psc.get("seccompProfile"))["type"] == "RuntimeDefault"


def test_injector_and_test_pods_meet_restricted_pod_security() -> None:
    objects = render()
    deploy = find(objects, "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    _restricted(pod["containers"][0], pod)
    test_pod = find(objects, "Pod")
    _restricted(test_pod["spec"]["containers"][0], test_pod["spec"])
    assert (
        find(objects, "Namespace")["metadata"]["labels"]["pod-security.kubernetes.io/enforce"]
        == "restricted"
    )


def test_two_replicas_spread_across_nodes_with_a_disruption_budget() -> None:
    objects = render()
    deploy = find(objects, "Deployment")
    spec = deploy["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}
    selector = spec["selector"]["matchLabels"]
    pod = spec["template"]["spec"]
    [spread] = pod["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert spread["labelSelector"]["matchLabels"] == selector
    anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["podAffinityTerm"]["labelSelector"]["matchLabels"] == selector
    pdb = find(objects, "PodDisruptionBudget")
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": selector}}
    service = find(objects, "Service")
    assert service["spec"]["selector"] == selector
    # The test pod carries the chart's name and instance but must never be a Service backend.
    test_labels = find(objects, "Pod")["metadata"]["labels"]
    assert not all(test_labels.get(k) == v for k, v in selector.items())


# ---- TLS -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "values",
    [
        None,
        {"tls.certManager.enabled": True},
        {"webhook.url": "https://127.0.0.1:9443/inject"},
        {"workloadRBAC": [{"namespace": "team-a", "leaderLabel": True}], "injector.autoRBAC": True},
    ],
    ids=["defaults", "cert-manager", "url", "rbac"],
)
def test_two_renders_of_the_same_values_are_byte_identical(values: Any) -> None:
    """GitOps (Argo CD, Flux): nothing random in a render, so no diff and no rollout per sync."""
    first = template(values, release="rel", namespace="ns1").stdout
    assert first == template(values, release="rel", namespace="ns1").stdout
    assert "BEGIN CERTIFICATE" not in first and "BEGIN PRIVATE KEY" not in first
    assert "checksum/" not in first


@pytest.mark.parametrize(
    ("url", "extra_host"),
    [
        ("", None),
        ("https://127.0.0.1:9443/inject", "127.0.0.1"),
        ("https://injector.dev.example:8443/inject", "injector.dev.example"),
    ],
)
def test_the_injector_keeps_its_own_certificate_in_an_empty_secret(
    url: str, extra_host: str | None
) -> None:
    objects = render({"webhook.url": url} if url else None, release="rel", namespace="ns1")
    secret = find(objects, "Secret")
    assert secret["type"] == "Opaque" and "data" not in secret  # the injector fills it
    name = secret["metadata"]["name"]
    config = find(objects, "MutatingWebhookConfiguration")
    assert all("caBundle" not in w["clientConfig"] for w in config["webhooks"])
    deploy = find(objects, "Deployment")["spec"]["template"]
    assert "annotations" not in deploy["metadata"]  # no checksum: nothing to roll on a sync
    assert all("secret" not in v for v in deploy["spec"]["volumes"])  # read through the API
    env = _injector_env(objects)
    assert env["GRELMICRO_INJECTOR_TLS_SECRET"] == f"ns1/{name}"
    assert env["GRELMICRO_INJECTOR_WEBHOOK_CONFIG"] == config["metadata"]["name"]
    hosts = env["GRELMICRO_INJECTOR_CERT_HOSTS"].split(",")
    assert {
        "rel-grelmicro-sidecar",
        "rel-grelmicro-sidecar.ns1",
        "rel-grelmicro-sidecar.ns1.svc",
    } <= set(hosts)
    assert (extra_host in hosts) if extra_host else len(hosts) == 3
    assert (env["GRELMICRO_INJECTOR_CA_VALIDITY"], env["GRELMICRO_INJECTOR_CERT_VALIDITY"]) == (
        "87600h",
        "8760h",
    )
    # Least privilege: that one Secret and that one configuration, get and update only.
    role = find(objects, "Role", "rel-grelmicro-sidecar-injector")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": [name],
         "verbs": ["get", "update"]}
    ]  # fmt: skip
    cluster_rules = find(objects, "ClusterRole", "rel-grelmicro-sidecar-injector")["rules"]
    assert {
        "apiGroups": ["admissionregistration.k8s.io"],
        "resources": ["mutatingwebhookconfigurations"],
        "resourceNames": [config["metadata"]["name"]],
        "verbs": ["get", "update"],
    } in cluster_rules


def test_cert_manager_issues_the_serving_certificate_and_injects_the_ca() -> None:
    objects = render({"tls.certManager.enabled": True}, release="rel", namespace="ns1")
    assert not [o for o in objects if o["kind"] == "Secret"]
    serving = find(objects, "Certificate", "rel-grelmicro-sidecar-serving")
    assert serving["spec"]["secretName"] == "rel-grelmicro-sidecar-tls"
    assert serving["spec"]["dnsNames"] == [
        "rel-grelmicro-sidecar",
        "rel-grelmicro-sidecar.ns1",
        "rel-grelmicro-sidecar.ns1.svc",
    ]
    assert serving["spec"]["issuerRef"] == {
        "name": "rel-grelmicro-sidecar-ca",
        "kind": "Issuer",
        "group": "cert-manager.io",
    }
    ca = find(objects, "Certificate", "rel-grelmicro-sidecar-ca")
    assert ca["spec"]["isCA"] is True
    assert find(objects, "Issuer", "rel-grelmicro-sidecar-ca")["spec"] == {
        "ca": {"secretName": "rel-grelmicro-sidecar-ca"}
    }
    assert find(objects, "Issuer", "rel-grelmicro-sidecar-selfsigned")["spec"] == {"selfSigned": {}}
    webhook = find(objects, "MutatingWebhookConfiguration")
    assert webhook["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": "ns1/rel-grelmicro-sidecar-serving"
    }
    assert all("caBundle" not in w["clientConfig"] for w in webhook["webhooks"])
    # The injector serves the mounted files and keeps no certificate of its own.
    env = _injector_env(objects)
    assert "GRELMICRO_INJECTOR_TLS_SECRET" not in env
    assert env["GRELMICRO_INJECTOR_TLS_CERT_FILE"] == "/etc/grelmicro-sidecar/tls/tls.crt"
    volumes = find(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "tls", "secret": {"secretName": "rel-grelmicro-sidecar-tls"}} in volumes
    assert not [o for o in objects if o["kind"] == "Role" and "injector" in o["metadata"]["name"]]

    own = render(
        {
            "tls.certManager.enabled": True,
            "tls.certManager.issuerRef": {"name": "corp", "kind": "ClusterIssuer"},
        }
    )
    assert [o["metadata"]["name"] for o in own if o["kind"] in ("Certificate", "Issuer")] == [
        "grelmicro-sidecar-serving"
    ]
    assert find(own, "Certificate")["spec"]["issuerRef"] == {
        "name": "corp",
        "kind": "ClusterIssuer",
        "group": "cert-manager.io",
    }


# ---- drift against the code ------------------------------------------------------


def _webhook_from_code(objects: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
    rendered = find(objects, "MutatingWebhookConfiguration")
    ca_bundle = rendered["webhooks"][0]["clientConfig"].get("caBundle")
    return webhook_configuration(ca_bundle, **kwargs)


@pytest.mark.parametrize(
    ("values", "kwargs"),
    [
        (
            None,
            {
                "service": {"namespace": "ops", "name": "rel-grelmicro-sidecar"},
                "excluded_namespaces": ["kube-system", "ops"],
            },
        ),
        (
            {"webhook.excludedNamespaces": ["zeta", "alpha", "kube-system"]},
            {
                "service": {"namespace": "ops", "name": "rel-grelmicro-sidecar"},
                "excluded_namespaces": ["zeta", "alpha", "kube-system", "ops"],
            },
        ),
        (
            {"webhook.url": "https://127.0.0.1:9443/inject"},
            {"url": "https://127.0.0.1:9443/inject", "excluded_namespaces": ["kube-system", "ops"]},
        ),
        (
            {"webhook.failurePolicy": "Ignore", "webhook.timeoutSeconds": 3},
            {
                "service": {"namespace": "ops", "name": "rel-grelmicro-sidecar"},
                "excluded_namespaces": ["kube-system", "ops"],
                "failure_policy": "Ignore",
                "timeout_seconds": 3,
            },
        ),
    ],
    ids=["service", "extra-exclusions", "url", "failure-policy"],
)
def test_webhook_configuration_matches_the_injectors_definition(
    values: Any, kwargs: dict[str, Any]
) -> None:
    objects = render(values, release="rel", namespace="ops")
    rendered = find(objects, "MutatingWebhookConfiguration")
    expected = _webhook_from_code(objects, name="rel-grelmicro-sidecar-injector", **kwargs)
    assert rendered["webhooks"] == expected["webhooks"]
    assert rendered["metadata"]["name"] == expected["metadata"]["name"]
    assert expected["metadata"]["labels"].items() <= rendered["metadata"]["labels"].items()
    # For a release named like the chart, the object has the injector's default name.
    default = find(render(), "MutatingWebhookConfiguration")
    assert (
        default["metadata"]["name"]
        == webhook_configuration("x", url="https://h/inject")["metadata"]["name"]
    )


def _injector_env(objects: list[dict[str, Any]]) -> dict[str, str]:
    container = find(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def test_injector_env_names_real_flags_and_parses_into_the_values() -> None:
    values = {
        "image.repository": "registry.example/grelmicro-sidecar",
        "image.tag": "1.2.3",
        "sidecar.image.pullPolicy": "Always",
        "sidecar.resources": {
            "requests": {"cpu": "15m", "memory": "40Mi"},
            "limits": {"memory": "80Mi"},
        },
        "sidecar.leaseDuration": "20s",
        "sidecar.renewDeadline": "12s",
        "sidecar.retryPeriod": "3s",
        "webhook.excludedNamespaces": ["ops"],
        "injector.autoRBAC": True,
        "injector.sweepInterval": "0",
        "injector.sweepMargin": "2m",
        "injector.logLevel": "debug",
        "injector.port": 9443,
        "injector.healthPort": 9090,
    }
    objects = render(values, namespace="injector-ns")
    env = _injector_env(objects)
    flags = {a.dest for a in build_parser()._actions if a.option_strings}
    for name in env:
        if name.startswith("GRELMICRO_INJECTOR_"):
            flag = name.removeprefix("GRELMICRO_INJECTOR_").lower()
            assert flag in flags, f"{name} is not a flag of `grelmicro-sidecar injector`"
            assert env_name(flag.replace("_", "-")) == name
    args = argparse.Namespace(**{f: None for f in flags})
    settings = injector_settings(args, environ={**env, "POD_NAMESPACE": "injector-ns"})
    assert settings.port == 9443 and settings.health_port == 9090
    assert str(settings.tls_cert_file) == "/etc/grelmicro-sidecar/tls/tls.crt"
    assert str(settings.tls_key_file) == "/etc/grelmicro-sidecar/tls/tls.key"
    assert settings.sidecar.image == "registry.example/grelmicro-sidecar:1.2.3"
    assert settings.sidecar.pull_policy == "Always"
    assert (
        settings.sidecar.cpu_request,
        settings.sidecar.memory_request,
        settings.sidecar.memory_limit,
    ) == ("15m", "40Mi", "80Mi")
    timing = settings.sidecar.timing
    assert (timing.lease_duration, timing.renew_deadline, timing.retry_period) == (20.0, 12.0, 3.0)
    assert sorted(settings.excluded_namespaces) == ["injector-ns", "kube-system", "ops"]
    assert settings.auto_rbac is True
    assert settings.sweep_interval == 0 and settings.sweep_margin == 120.0
    assert settings.log_level == "debug"
    # The webhook's exclusions and the injector's are the same list.
    webhook = find(objects, "MutatingWebhookConfiguration")["webhooks"][0]
    assert webhook["namespaceSelector"]["matchExpressions"][0]["values"] == sorted(
        settings.excluded_namespaces
    )
    container = find(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["injector"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"webhook": 9443, "health": 9090}


def test_workload_role_is_the_same_everywhere() -> None:
    objects = render(
        {"workloadRBAC": [{"namespace": "team-a", "serviceAccounts": ["default", "worker"]}]}
    )
    chart_role = find(objects, "Role", injector_rbac.ROLE_NAME)
    [manifest_role, manifest_binding] = docs((MANIFESTS / "rbac.yaml").read_text())
    code_role = injector_rbac.role("team-a")
    assert chart_role["rules"] == manifest_role["rules"] == code_role["rules"]
    assert (
        chart_role["metadata"]["name"]
        == manifest_role["metadata"]["name"]
        == code_role["metadata"]["name"]
    )
    bindings = sorted(
        o["metadata"]["name"]
        for o in objects
        if o["kind"] == "RoleBinding" and not is_hook(o) and o["metadata"]["namespace"] == "team-a"
    )
    assert bindings == [injector_rbac.binding_name("default"), injector_rbac.binding_name("worker")]
    # The same rules as one ClusterRole, for a RoleBinding per namespace (NOTES.txt), and every
    # grant outlives `helm uninstall`: running sidecars keep their Leases.
    cluster_role = find(objects, "ClusterRole", "grelmicro-sidecar-leases")
    assert cluster_role["rules"] == code_role["rules"]
    kept = [o for o in objects if o["metadata"].get("namespace") == "team-a" or o is cluster_role]
    assert len(kept) == 4
    assert all(o["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep" for o in kept)
    assert manifest_binding["metadata"]["name"] == injector_rbac.binding_name("default")
    code_binding = injector_rbac.role_binding("team-a", "worker")
    chart_binding = find(objects, "RoleBinding", injector_rbac.binding_name("worker"))
    assert chart_binding["roleRef"] == code_binding["roleRef"]
    assert chart_binding["subjects"] == code_binding["subjects"]


def test_leader_label_policy_and_role_are_the_same_everywhere() -> None:
    objects = render({"workloadRBAC": [{"namespace": "team-a", "leaderLabel": True}]})
    manifest = docs((MANIFESTS / "leader-label.yaml").read_text())
    for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
        chart_obj, manifest_obj = find(objects, kind), find(manifest, kind)
        assert chart_obj["metadata"]["name"] == manifest_obj["metadata"]["name"]
        assert chart_obj["spec"] == manifest_obj["spec"], kind
    assert find(objects, kind)["metadata"]["name"] == injector_rbac.LABEL_POLICY
    chart_role = find(objects, "Role", injector_rbac.LABEL_ROLE_NAME)
    manifest_role = find(manifest, "Role", injector_rbac.LABEL_ROLE_NAME)
    assert (
        chart_role["rules"]
        == manifest_role["rules"]
        == injector_rbac.role("x", "leader-label")["rules"]
    )
    # Bound to a ServiceAccount of its own, never `default` (contract §8, issue 27 item 5),
    # with the Leases too; the same names as autoRBAC gives that account.
    account = "grelmicro-sidecar"
    assert find(manifest, "ServiceAccount", account)
    team_a = [o for o in objects if o["metadata"].get("namespace") == "team-a"]
    assert [o["metadata"]["name"] for o in team_a if o["kind"] == "ServiceAccount"] == [account]
    for role_name in (injector_rbac.LABEL_ROLE_NAME, injector_rbac.ROLE_NAME):
        name = injector_rbac.binding_name(account, role_name)
        chart_binding, manifest_binding = (
            find(objects, "RoleBinding", name),
            find(manifest, "RoleBinding", name),
        )
        assert chart_binding["roleRef"] == manifest_binding["roleRef"]
        assert chart_binding["roleRef"]["name"] == role_name
        assert [s["name"] for s in chart_binding["subjects"]] == [account]
        assert [s["name"] for s in manifest_binding["subjects"]] == [account]
    label_bindings = [
        o
        for o in objects
        if o["kind"] == "RoleBinding" and o["roleRef"]["name"] == injector_rbac.LABEL_ROLE_NAME
    ]
    assert len(label_bindings) == 1, label_bindings
    # No label grant without the policy that limits it.
    refused = template(
        {
            "workloadRBAC": [{"namespace": "team-a", "leaderLabel": True}],
            "leaderLabel.policy": False,
        },
        check=False,
    )
    assert refused.returncode != 0
    assert "leaderLabel needs leaderLabel.policy=true" in refused.stderr
    without = render({"workloadRBAC": [{"namespace": "team-a"}]})
    assert not [
        o
        for o in without
        if "leader-label" in o["metadata"]["name"]
        and o["kind"] != "ValidatingAdmissionPolicy"
        and o["kind"] != "ValidatingAdmissionPolicyBinding"
    ]


def test_injector_cluster_role_grows_only_with_auto_rbac() -> None:
    def rules(values: Any) -> list[dict[str, Any]]:
        return find(render(values), "ClusterRole", "grelmicro-sidecar-injector")["rules"]

    base = rules(None)
    assert base == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "list", "watch", "delete"],
        },
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
        {
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["mutatingwebhookconfigurations"],
            "resourceNames": ["grelmicro-sidecar-injector"],
            "verbs": ["get", "update"],
        },
        {
            "apiGroups": ["authorization.k8s.io"],
            "resources": ["subjectaccessreviews"],
            "verbs": ["create"],
        },
    ]
    auto = rules({"injector.autoRBAC": True})
    leases = next(r for r in auto if r["resources"] == ["leases"])
    # Kubernetes lets it grant only what it holds: every verb of the Role it creates.
    assert set(injector_rbac.VERBS) <= set(leases["verbs"])
    assert {
        "apiGroups": ["rbac.authorization.k8s.io"],
        "resources": ["roles", "rolebindings"],
        "verbs": ["create", "get"],
    } in auto
    assert {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]} in auto
    # ... and the Event verbs the Role grants too.
    events = next(r for r in auto if r["resources"] == ["events"])
    assert set(injector_rbac.EVENT_VERBS) <= set(events["verbs"])
    assert not any(r["resources"] == ["events"] for r in base)
    # The leader label's grant (pods patch, the marker), only while the policy is installed.
    label_rules = [r for r in injector_rbac.role("x", "leader-label")["rules"]]
    assert all(r in auto for r in label_rules)
    no_policy = rules({"injector.autoRBAC": True, "leaderLabel.policy": False})
    assert not any(r in no_policy for r in label_rules)
    assert not any("patch" in r["verbs"] and r["resources"] == ["pods"] for r in base)


def test_install_yaml_is_the_chart_rendered() -> None:
    committed = (MANIFESTS / "install.yaml").read_text()
    assert committed == render_module.install_yaml(), (
        "manifests/install.yaml drifted from the chart: run `make manifests` and commit it"
    )
    objects = docs(committed)
    kinds = sorted(o["kind"] for o in objects)
    assert kinds == sorted(
        [
            "Namespace",
            "PodDisruptionBudget",
            "ServiceAccount",
            "Secret",  # empty: the injector keeps its own certificate in it
            "ClusterRole",
            "ClusterRole",  # the sidecar's Leases, for a RoleBinding per namespace
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "Service",
            "Deployment",
            "MutatingWebhookConfiguration",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        ]
    )
    assert not [o for o in objects if is_hook(o)]
    assert "PRIVATE KEY" not in committed  # nothing secret in a file everyone applies


def test_renders_with_helms_defaults_for_offline_and_gitops_use() -> None:
    """No --kube-version: helm renders with its built-in version (older than 1.30).

    The version is checked only against a real cluster (the template's lookup
    finds kube-system), so offline rendering still yields every manifest.
    """
    result = helm("template", "t", str(CHART), check=False)
    assert result.returncode == 0, result.stderr
    kinds = {d["kind"] for d in docs(result.stdout)}
    assert {"Deployment", "Service", "MutatingWebhookConfiguration"} <= kinds, kinds


def test_helm_package_carries_the_release_version(tmp_path: Path) -> None:
    """The archive a user pushes (docs/install.md: helm push ... oci://) names this release's version."""
    from sidecar import __version__

    helm("package", str(CHART), f"--destination={tmp_path}")
    archive = tmp_path / f"grelmicro-sidecar-{__version__}.tgz"
    assert archive.exists(), list(tmp_path.iterdir())
    shown = yaml.safe_load(helm("show", "chart", str(archive)).stdout)
    assert (shown["version"], shown["appVersion"]) == (__version__, __version__)
    # The image the chart installs by default is the same release.
    values = yaml.safe_load(helm("show", "values", str(archive)).stdout)
    assert values["image"].get("tag") in ("", None, __version__), values["image"]


MONITORING_ON = {
    "monitoring.serviceMonitor.enabled": True,
    "monitoring.serviceMonitor.labels": {"release": "prom"},
    "monitoring.podMonitor.enabled": True,
    "monitoring.dashboard.enabled": True,
    "networkPolicy.enabled": True,
    "networkPolicy.webhookFrom": [{"ipBlock": {"cidr": "10.0.0.1/32"}}],
}


def test_monitoring_and_network_policy_are_off_by_default_and_fit_the_chart_when_on() -> None:
    from sidecar.injector.patch import PORT_NAME

    optional = {"ServiceMonitor", "PodMonitor", "NetworkPolicy"}
    assert not optional & {o["kind"] for o in render()}
    assert not [o for o in render() if o["metadata"]["name"].endswith("-dashboard")]
    objects = render(MONITORING_ON)
    service = find(objects, "Service")
    container = find(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    monitor = find(objects, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= {
        p["name"] for p in service["spec"]["ports"]
    }
    pods = find(objects, "PodMonitor")
    assert pods["spec"]["namespaceSelector"] == {"any": True}
    assert [e["port"] for e in pods["spec"]["podMetricsEndpoints"]] == [PORT_NAME]
    policy = find(objects, "NetworkPolicy")
    assert policy["spec"]["podSelector"]["matchLabels"] == service["spec"]["selector"]
    named = {p["name"] for p in container["ports"]}
    rules = policy["spec"]["ingress"]
    assert {p["port"] for rule in rules for p in rule["ports"]} == named == {"webhook", "health"}
    webhook = next(r for r in rules if r["ports"][0]["port"] == "webhook")
    assert webhook["from"] == [{"ipBlock": {"cidr": "10.0.0.1/32"}}]
    dashboard = find(objects, "ConfigMap", "grelmicro-sidecar-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["grelmicro-sidecar.json"]) == _dashboard()


def _dashboard() -> dict[str, Any]:
    return dict(json.loads((CHART / "dashboards" / "grelmicro-sidecar.json").read_text()))


def test_every_dashboard_query_uses_metrics_the_product_serves() -> None:
    """Each metric a panel queries is one that /metrics of the sidecar or the injector exposes."""
    import re

    from tests.metrics import served_names

    served = served_names()
    queries = [t["expr"] for p in _dashboard()["panels"] for t in p["targets"]]
    assert len(queries) >= 11
    functions = {"max", "sum", "by", "increase", "rate", "histogram_quantile", "abs", "le"}
    for expr in queries:
        names = set(
            re.findall(r"\b([a-z_]+_(?:total|status|seconds|bucket|transitions|healthy))\b", expr)
        )
        assert names, expr
        assert names - functions <= served, (expr, names - served)
    # The manifests carry the same dashboard for users without the chart.
    assert json.loads((MANIFESTS / "grafana-dashboard.json").read_text()) == _dashboard()
