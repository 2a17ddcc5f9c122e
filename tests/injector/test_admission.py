"""The real API server calls the injector over TLS: injection, scope, denials, outage."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from sidecar.injector.webhookconfig import WEBHOOK_NAME
from tests.cluster import ControlPlane

from .conftest import (
    IMAGE,
    INJECT,
    Injector,
    Registration,
    Tls,
    annotated_pod,
    audit_events,
    plain_pod,
    register,
    unregister,
    wait_for_default_service_account,
)

P = "leader-election.grelmicro.io/"


def _wait_pods(
    core: Any, namespace: str, selector: str, count: int, timeout: float = 60
) -> list[Any]:
    deadline = time.monotonic() + timeout
    pods: list[Any] = []
    while time.monotonic() < deadline:
        pods = core.list_namespaced_pod(namespace, label_selector=selector).items
        if len(pods) >= count:
            return pods
        time.sleep(0.2)
    raise AssertionError(f"{len(pods)} pods of {count} after {timeout}s")


def test_deployment_pods_get_one_sidecar_with_annotation_settings(
    api: Any, namespace: str, webhook: Registration
) -> None:
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    labels = {"app": "web"}
    annotations = {
        INJECT: "true",
        P + "lease-duration": "20s",
        P + "renew-deadline": "12s",
        P + "retry-period": "3s",
        P + "port": "4100",
        P + "state-dir": "/run/leader",
        P + "gate-readiness": "true",
    }
    apps.create_namespaced_deployment(
        namespace,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web-frontend"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels, "annotations": annotations},
                    "spec": {
                        "containers": [
                            {"name": "web", "image": "nginx"},
                            {
                                "name": "worker",
                                "image": "busybox",
                                "env": [{"name": "A", "value": "1"}],
                            },
                        ]
                    },
                },
            },
        },
    )
    pods = _wait_pods(core, namespace, "app=web", 2)
    assert len(pods) == 2
    for pod in pods:
        inits = pod.spec.init_containers or []
        sidecars = [c for c in inits + pod.spec.containers if c.name == "grelmicro-sidecar"]
        assert len(sidecars) == 1, [c.name for c in inits + pod.spec.containers]
        sc = inits[0]
        assert sc.name == "grelmicro-sidecar" and sc.restart_policy == "Always"
        assert sc.image == IMAGE
        assert sc.args == [
            "run",
            "--election=web-frontend",  # the Deployment's name, not the ReplicaSet's
            "--lease-duration=20s",
            "--renew-deadline=12s",
            "--retry-period=3s",
            "--state-dir=/run/leader",
            "--port=4100",
            "--ack-file=/run/leader-ack/drained",
        ]
        env = {e.name: e.value_from.field_ref.field_path for e in sc.env}
        assert env == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
        assert [(p.name, p.container_port) for p in sc.ports] == [("leader-http", 4100)]
        assert sc.startup_probe.http_get.path == "/healthz"
        assert sc.liveness_probe.http_get.path == "/healthz"
        assert sc.readiness_probe.http_get.path == "/leader"
        sec = sc.security_context
        assert sec.run_as_non_root and sec.read_only_root_filesystem
        assert sec.allow_privilege_escalation is False
        assert sec.capabilities.drop == ["ALL"] and sec.seccomp_profile.type == "RuntimeDefault"
        assert sc.resources.requests == {"cpu": "10m", "memory": "32Mi"}
        assert sc.resources.limits == {"memory": "64Mi"}
        # (the API server adds the service-account token mount to every container)
        assert [
            (m.name, m.mount_path, bool(m.read_only))
            for m in sc.volume_mounts
            if m.name == "leader-election"
        ] == [("leader-election", "/run/leader", False)]
        # The ack directory: the app writes there, the sidecar only reads (contract §4, the drain).
        assert [
            (m.name, m.mount_path, bool(m.read_only))
            for m in sc.volume_mounts
            if m.name == "leader-election-ack"
        ] == [("leader-election-ack", "/run/leader-ack", True)]
        for name in ("leader-election", "leader-election-ack"):
            volumes = [v for v in pod.spec.volumes if v.name == name]
            assert len(volumes) == 1 and volumes[0].empty_dir is not None, name
        for app in pod.spec.containers:
            mounts = [(m.name, m.mount_path, bool(m.read_only)) for m in app.volume_mounts or []]
            assert ("leader-election", "/run/leader", True) in mounts, app.name
            assert ("leader-election-ack", "/run/leader-ack", False) in mounts, app.name
            app_env = {e.name: e.value for e in app.env or []}
            assert app_env["LEADER_ELECTION_STATE_FILE"] == "/run/leader/state.json"
            assert app_env["LEADER_ELECTION_URL"] == "http://127.0.0.1:4100/leader"
            assert app_env["LEADER_ELECTION_ACK_FILE"] == "/run/leader-ack/drained"
            assert app_env["LEADER_ELECTION_DRAINED_URL"] == "http://127.0.0.1:4100/drained"
        worker = next(c for c in pod.spec.containers if c.name == "worker")
        assert {e.name for e in worker.env} >= {"A"}  # the app's own env is kept


def test_defaults_and_no_readiness_gate(api: Any, namespace: str, webhook: Registration) -> None:
    core = client.CoreV1Api(api)
    pod = core.create_namespaced_pod(namespace, annotated_pod("solo"))
    sc = pod.spec.init_containers[0]
    assert sc.args == [
        "run",
        "--election=solo",
        "--lease-duration=15s",
        "--renew-deadline=10s",
        "--retry-period=2s",
        "--state-dir=/var/run/leader-election",
        "--port=4040",
        "--ack-file=/var/run/leader-election-ack/drained",
    ]
    assert sc.readiness_probe is None


def test_unannotated_pod_is_unchanged_and_the_webhook_not_called(
    cluster: ControlPlane, api: Any, namespace: str, webhook: Registration, injector: Injector
) -> None:
    core = client.CoreV1Api(api)
    before = injector.admissions()
    plain = core.create_namespaced_pod(namespace, plain_pod("plain"))
    also = plain_pod("not-true")
    also["metadata"]["annotations"] = {INJECT: "false"}
    core.create_namespaced_pod(namespace, also)
    # Not one request reached the injector for those two.
    assert injector.admissions() == before
    injected = core.create_namespaced_pod(namespace, annotated_pod("injected"))
    # The same count moves for an annotated pod (once, or twice when the API server
    # reinvokes the webhook after its own plugins changed the pod), so it can tell.
    assert injector.admissions() > before
    assert plain.spec.init_containers is None
    assert [c.name for c in plain.spec.containers] == ["app"]
    assert not plain.spec.containers[0].volume_mounts or all(
        m.name != "leader-election" for m in plain.spec.containers[0].volume_mounts
    )
    assert injected.spec.init_containers[0].name == "grelmicro-sidecar"

    # And the API server's own record says the same.
    deadline = time.monotonic() + 10
    calls: dict[str, bool] = {}
    while time.monotonic() < deadline:
        calls = {}
        for event in audit_events(cluster, namespace):
            ref = event["objectRef"]
            if (
                event.get("verb") != "create"
                or ref.get("subresource")
                or event.get("stage") != "ResponseComplete"
            ):
                continue
            notes = event.get("annotations") or {}
            called = any(
                k.startswith("mutation.webhook.admission.k8s.io/")
                and json.loads(v).get("webhook") == WEBHOOK_NAME
                for k, v in notes.items()
            )
            calls[ref.get("name", "")] = called
        if {"plain", "not-true", "injected"} <= calls.keys():
            break
        time.sleep(0.2)
    assert calls.get("injected") is True, calls
    assert calls.get("plain") is False and calls.get("not-true") is False, calls


INVALID = [
    ("lease-duration", "fifteen", "a duration such as 15s"),
    ("lease-duration", "5s", "must be greater than renew-deadline 10s"),
    ("renew-deadline", "2s", "must be greater than 1.2 × retry-period 2s"),
    ("retry-period", "-1s", "a duration such as 15s"),
    ("lease-duration", "15500ms", "whole number of seconds"),
    ("port", "70000", "a port number from 1 to 65535"),
    ("port", "http", "a port number from 1 to 65535"),
    ("state-dir", "relative/dir", "an absolute directory path"),
    ("state-dir", "/var/../etc", "no '..'"),
    ("gate-readiness", "yes", '"true" or "false"'),
    ("label-leader", "on", '"true" or "false"'),
    ("name", "---", "an election name with letters or digits"),
    ("lease-duraton", "20s", "is not a known annotation"),
]


@pytest.mark.parametrize(
    ("key", "value", "accepted"), INVALID, ids=[f"{k}={v}" for k, v, _ in INVALID]
)
def test_invalid_annotation_is_denied_with_a_message_kubectl_shows(
    cluster: ControlPlane,
    namespace: str,
    webhook: Registration,
    key: str,
    value: str,
    accepted: str,
) -> None:
    manifest = annotated_pod("bad", {P + key: value})
    manifest["metadata"]["namespace"] = namespace
    result = cluster.kubectl("apply", "-f", "-", input=json.dumps(manifest), check=False)
    assert result.returncode != 0
    err = result.stderr
    assert f'admission webhook "{WEBHOOK_NAME}" denied the request' in err, err
    assert P + key in err and json.dumps(value) in err and accepted in err, err
    got = cluster.kubectl("get", "pod", "bad", "-n", namespace, check=False)
    assert got.returncode != 0  # nothing was created


def test_conflicting_pod_is_denied_with_the_fix(
    api: Any, namespace: str, webhook: Registration
) -> None:
    core = client.CoreV1Api(api)
    pod = annotated_pod("busy-port")
    pod["spec"]["containers"][0]["ports"] = [{"containerPort": 4040}]
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod(namespace, pod)
    assert err.value.status == 400
    message = json.loads(err.value.body)["message"]
    assert "declares port 4040" in message and P + "port" in message


def test_reinvocation_and_resubmission_never_add_a_second_sidecar(
    api: Any, namespace: str, webhook: Registration
) -> None:
    core = client.CoreV1Api(api)
    first = core.create_namespaced_pod(namespace, annotated_pod("once"))
    again = api.sanitize_for_serialization(first)
    again["metadata"] = {"name": "twice", "annotations": again["metadata"]["annotations"]}
    second = core.create_namespaced_pod(namespace, again)
    names = [c.name for c in (second.spec.init_containers or []) + second.spec.containers]
    assert names.count("grelmicro-sidecar") == 1
    assert [v.name for v in second.spec.volumes].count("leader-election") == 1
    assert len(second.spec.containers[0].volume_mounts) == len(
        first.spec.containers[0].volume_mounts
    )


def test_injector_down_blocks_annotated_pods_only(
    cluster: ControlPlane, api: Any, namespace: str, tls: Tls, tmp_path: Path
) -> None:
    core = client.CoreV1Api(api)
    own = Injector(cluster, tls, tmp_path / "injector.log").start()
    reg = register(api, own.url, tls.ca_pem, namespace)
    try:
        assert own.stop() == 0  # SIGTERM: a clean exit
        plain = core.create_namespaced_pod(namespace, plain_pod("still-fine"))
        assert plain.metadata.name == "still-fine"
        with pytest.raises(ApiException) as err:
            core.create_namespaced_pod(namespace, annotated_pod("refused"))
        message = json.loads(err.value.body)["message"]
        assert f'failed calling webhook "{WEBHOOK_NAME}"' in message, message
        with pytest.raises(ApiException):
            core.read_namespaced_pod("refused", namespace)
    finally:
        own.stop()
        unregister(api, reg.name)


def test_excluded_namespace_is_never_touched(
    api: Any, injector: Injector, tls: Tls, namespace: str
) -> None:
    """One configuration over two namespaces, one excluded: live in one, silent in the other."""
    from sidecar.injector.webhookconfig import ca_bundle_of, webhook_configuration

    core = client.CoreV1Api(api)
    other = f"t-{uuid.uuid4().hex[:10]}"
    core.create_namespace({"metadata": {"name": other}})
    name = f"grelmicro-sidecar-injector-excl-{uuid.uuid4().hex[:6]}"
    config = webhook_configuration(
        ca_bundle_of(tls.ca_pem), url=injector.url, excluded_namespaces=[namespace], name=name
    )
    config["webhooks"][0]["namespaceSelector"]["matchExpressions"].append(
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [namespace, other]}
    )
    client.AdmissionregistrationV1Api(api).create_mutating_webhook_configuration(config)
    try:
        for ns in (namespace, other):
            wait_for_default_service_account(api, ns)
        deadline = time.monotonic() + 30
        while True:  # the configuration is live once it injects in the other namespace
            probe = core.create_namespaced_pod(other, annotated_pod("probe"), dry_run="All")
            if probe.spec.init_containers:
                break
            assert time.monotonic() < deadline, "the configuration never took effect"
            time.sleep(0.1)
        before = injector.admissions()
        pod = core.create_namespaced_pod(namespace, annotated_pod("excluded"))
        assert pod.spec.init_containers is None
        assert injector.admissions() == before
    finally:
        unregister(api, name)
        core.delete_namespace(other)


def test_injected_pod_passes_pod_security_restricted(
    api: Any, namespace: str, webhook: Registration
) -> None:
    """contract §8: the sidecar must not be what makes a pod fail the 'restricted' profile."""
    core = client.CoreV1Api(api)
    core.patch_namespace(
        namespace, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}
    )
    restricted = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    pod = annotated_pod("strict")
    pod["spec"]["containers"][0]["securityContext"] = restricted
    made = core.create_namespaced_pod(namespace, pod)
    assert made.spec.init_containers[0].name == "grelmicro-sidecar"
    # The same namespace refuses a pod that is not compliant: the check is live.
    loose = annotated_pod("loose")
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod(namespace, loose)
    assert "violates PodSecurity" in json.loads(err.value.body)["message"]
    assert 'container "grelmicro-sidecar"' not in json.loads(err.value.body)["message"]
