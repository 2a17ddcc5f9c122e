"""The leader label (contract §4, §8) against the real API server: the admission policy
of ``manifests/leader-label.yaml`` holds a token bound to pod A to that one label on
pod A, and sidecars run with ``--label-leader`` keep the label on the leader only.

Pods here are never scheduled (the control plane has no node): labels, tokens
bound to pods and admission need only the API server.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests import accounts
from tests.cluster import ControlPlane
from tests.sidecar.proc import SidecarProcess, wait_for

ROOT = Path(__file__).resolve().parents[2]
LABEL = "leader-election.grelmicro.io/leader"
SA = "grelmicro-sidecar"  # what manifests/leader-label.yaml creates and binds


def policy_only() -> str:
    """The file's ValidatingAdmissionPolicy and its binding (cluster-scoped), as one YAML stream."""
    text = (ROOT / "manifests" / "leader-label.yaml").read_text()
    return "\n---\n".join(d for d in text.split("\n---\n") if "AdmissionPolicy" in d)


@pytest.fixture
def label_grant(cluster: ControlPlane, api: Any, namespace: str) -> Iterator[None]:
    """``kubectl apply`` the Role, its binding and the policy, as docs/application.md says; wait for both.

    The policy is cluster-wide: deleted afterwards, so that a chart installed
    later in the session owns its own.
    """
    deadline = time.monotonic() + 60
    core = client.CoreV1Api(api)
    while not core.list_namespaced_service_account(namespace).items:  # kcm makes `default`
        assert time.monotonic() < deadline, "no default ServiceAccount"
        time.sleep(0.1)  # (other workloads' pods use it)
    cluster.kubectl("apply", "-n", namespace, "-f", str(ROOT / "manifests" / "rbac.yaml"))
    cluster.kubectl("apply", "-n", namespace, "-f", str(ROOT / "manifests" / "leader-label.yaml"))
    try:
        user = f"system:serviceaccount:{namespace}:{SA}"
        accounts.wait_until_allowed(api, namespace, user, ["patch"], group="", resource="pods")
        accounts.wait_until_allowed(api, namespace, user, accounts.LEASE_VERBS)
        yield
    finally:
        cluster.kubectl("delete", "--ignore-not-found", "-f", "-", input=policy_only())


def make_pod(api: Any, namespace: str, name: str, sa: str = SA) -> None:
    client.CoreV1Api(api).create_namespaced_pod(
        namespace,
        client.V1Pod(
            metadata=client.V1ObjectMeta(name=name, labels={"app": "x"}),
            spec=client.V1PodSpec(
                service_account_name=sa,
                containers=[client.V1Container(name="app", image="example.invalid/app:1")],
            ),
        ),
    )


def patch_as(cluster: ControlPlane, bearer: str, namespace: str, pod: str, body: Any) -> int:
    """The status of a merge patch of ``pod`` made with ``bearer`` (200, 403, ...), and why."""
    with accounts.token_client(cluster, bearer) as api_client:
        try:
            client.CoreV1Api(api_client).patch_namespaced_pod(pod, namespace, body)
        except client.ApiException as err:
            return int(err.status)
    return 200


def labels_of(api: Any, namespace: str, pod: str) -> dict[str, str]:
    return client.CoreV1Api(api).read_namespaced_pod(pod, namespace).metadata.labels or {}


def set_label(value: str | None) -> dict[str, Any]:
    return {"metadata": {"labels": {LABEL: value}}}


def wait_for_policy(cluster: ControlPlane, bearer: str, namespace: str) -> None:
    """The policy takes effect a moment after it is created: wait until it denies once."""
    deadline = time.monotonic() + 60
    while patch_as(cluster, bearer, namespace, "b", set_label("true")) != 403:
        client.CoreV1Api(cluster_admin(cluster)).patch_namespaced_pod(
            "b", namespace, set_label(None)
        )
        assert time.monotonic() < deadline, "the leader-label policy never took effect"
        time.sleep(0.2)


def cluster_admin(cluster: ControlPlane) -> Any:
    from kubernetes import config

    return config.new_client_from_config(config_file=str(cluster.kubeconfig))


def test_a_token_bound_to_pod_a_may_only_set_or_remove_the_leader_label_on_pod_a(
    cluster: ControlPlane, api: Any, namespace: str, label_grant: None
) -> None:
    make_pod(api, namespace, "a")
    make_pod(api, namespace, "b")
    bound_to_a = accounts.token(api, namespace, SA, bound_to_pod="a")
    wait_for_policy(cluster, bound_to_a, namespace)

    # What the sidecar does: set and remove the label on its own pod.
    assert patch_as(cluster, bound_to_a, namespace, "a", set_label("true")) == 200
    assert labels_of(api, namespace, "a") == {"app": "x", LABEL: "true"}
    assert patch_as(cluster, bound_to_a, namespace, "a", set_label(None)) == 200
    assert labels_of(api, namespace, "a") == {"app": "x"}

    # Everything else is refused.
    refused = {
        "label pod b": ("b", set_label("true")),
        "another value": ("a", set_label("false")),
        "another label": ("a", {"metadata": {"labels": {"app": "y"}}}),
        "a new label": ("a", {"metadata": {"labels": {"team": "z"}}}),
        "remove a label": ("a", {"metadata": {"labels": {"app": None}}}),
        "an annotation": ("a", {"metadata": {"annotations": {"x": "y"}}}),
        "the spec": ("a", {"spec": {"activeDeadlineSeconds": 5}}),
        "the label and the spec": (
            "a",
            {**set_label("true"), "spec": {"activeDeadlineSeconds": 5}},
        ),
        "a finalizer": ("a", {"metadata": {"finalizers": ["example.com/x"]}}),
    }
    answers = {
        what: patch_as(cluster, bound_to_a, namespace, pod, body)
        for what, (pod, body) in refused.items()
    }
    assert answers == dict.fromkeys(refused, 403)
    assert labels_of(api, namespace, "a") == {"app": "x"}
    assert labels_of(api, namespace, "b") == {"app": "x"}

    # A token of the same ServiceAccount bound to no pod may change no pod at all.
    unbound = accounts.token(api, namespace, SA)
    assert patch_as(cluster, unbound, namespace, "a", set_label("true")) == 403

    # The policy only limits holders of the grant: another ServiceAccount allowed
    # to patch pods by a Role of its own is untouched by it.
    accounts.service_account(api, namespace, "operator")
    accounts.grant(api, namespace, "operator", "pod-patcher", "", "pods", ["patch"])
    accounts.wait_until_allowed(
        api,
        namespace,
        f"system:serviceaccount:{namespace}:operator",
        ["patch"],
        group="",
        resource="pods",
    )
    make_pod(api, namespace, "op", sa="operator")
    operator = accounts.token(api, namespace, "operator", bound_to_pod="op")
    assert (
        patch_as(cluster, operator, namespace, "b", {"metadata": {"labels": {"team": "z"}}}) == 200
    )


FAST = ("--lease-duration=3s", "--renew-deadline=2s", "--retry-period=500ms")


def pod_sidecar(
    cluster: ControlPlane,
    api: Any,
    namespace: str,
    tmp_path: Path,
    pod: str,
    account: str = SA,
    extra: tuple[str, ...] = ("--label-leader",),
    server: str | None = None,
) -> SidecarProcess:
    """A started sidecar of ``pod``, with a token of ``account`` bound to that pod; its
    requests go to ``server`` (a proxy in front of the API server), else straight there."""
    kubeconfig = accounts.kubeconfig(
        tmp_path / f"{pod}.kubeconfig",
        server or cluster.server,
        cluster.ca_file,
        {"token": accounts.token(api, namespace, account, bound_to_pod=pod)},
        namespace,
    )
    proc = SidecarProcess(
        tmp_path, kubeconfig, namespace, identity=pod, extra=(*FAST, *extra), env={"POD_NAME": pod}
    )
    return proc.start()


def labelled(api: Any, namespace: str, pods: list[str]) -> list[str]:
    return [p for p in pods if labels_of(api, namespace, p).get(LABEL) == "true"]


def test_sidecars_keep_the_leader_label_on_the_leader_and_take_it_off_before_releasing(
    cluster: ControlPlane, api: Any, namespace: str, tmp_path: Path, label_grant: None
) -> None:
    pods = ["a", "b"]
    for pod in pods:
        make_pod(api, namespace, pod)
    # A label left behind by a sidecar that was killed: cleared at start-up.
    client.CoreV1Api(api).patch_namespaced_pod("b", namespace, set_label("true"))
    wait_for_policy(cluster, accounts.token(api, namespace, SA, bound_to_pod="a"), namespace)

    procs: dict[str, SidecarProcess] = {}
    try:
        for pod in pods:
            procs[pod] = pod_sidecar(cluster, api, namespace, tmp_path, pod)
            if pod == "a":
                wait_for(lambda: procs["a"].leads(), 30, what="a to lead")
        leader, follower = "a", "b"
        wait_for(lambda: labelled(api, namespace, pods) == [leader], 30, what="the label on a only")

        # Graceful stop of the leader: label off, then the Lease released, then b leads, labelled.
        procs[leader].signal(signal.SIGTERM)
        assert procs[leader].wait(30) == 0
        wait_for(lambda: procs[follower].leads(), 30, what="b to lead")
        wait_for(
            lambda: labelled(api, namespace, pods) == [follower], 30, what="the label on b only"
        )
        # The audit log (who wrote what, when): the leader's last pod write (the label
        # coming off; the pod is unlabelled now) came before its last Lease write (the release).
        removed = _last_write(cluster, namespace, "pods", leader, by_pod=leader)
        released = _last_write(cluster, namespace, "leases", "leader-main", by_pod=leader)
        assert labels_of(api, namespace, leader).get(LABEL) is None
        assert removed < released, (removed, released)
        assert not any("Traceback" in line for line in procs[leader].messages())
    finally:
        for proc in procs.values():
            proc.stop()
        for proc in procs.values():
            print(f"----- {proc.identity} -----\n{proc.raw_log()[-3000:]}")


def _last_write(
    cluster: ControlPlane, namespace: str, resource: str, name: str, by_pod: str
) -> str:
    """When the API server last accepted a write to ``name`` made with a token bound to ``by_pod``."""
    times = [
        str(event["stageTimestamp"])
        for event in cluster.audit_events()
        if (event.get("objectRef") or {}).get("namespace") == namespace
        and (event.get("objectRef") or {}).get("resource") == resource
        and (event.get("objectRef") or {}).get("name") == name
        and event.get("verb") in ("patch", "update")
        and event.get("stage") == "ResponseComplete"
        and (event.get("responseStatus") or {}).get("code", 200) < 300
        and ((event.get("user") or {}).get("extra") or {}).get(
            "authentication.kubernetes.io/pod-name"
        )
        == [by_pod]
    ]
    assert times, f"no accepted write to {resource}/{name} by pod {by_pod} in the audit log"
    return max(times)


def test_a_leader_whose_pod_is_being_deleted_takes_its_label_off_and_releases_at_once(
    cluster: ControlPlane, api: Any, namespace: str, tmp_path: Path, label_grant: None
) -> None:
    """What ``kubectl delete pod`` does to the leader: the pod is terminating when its
    sidecar gets SIGTERM. In real pods, every such stop waited out the label's whole
    settle budget (3 s) before the release (bench.pods, leader label). A finalizer keeps
    the pod terminating here, as the kubelet's grace period does on a node."""
    core = client.CoreV1Api(api)
    make_pod(api, namespace, "a")
    core.patch_namespaced_pod("a", namespace, {"metadata": {"finalizers": ["example.com/hold"]}})
    make_pod(api, namespace, "b")
    wait_for_policy(cluster, accounts.token(api, namespace, SA, bound_to_pod="a"), namespace)
    leader = pod_sidecar(cluster, api, namespace, tmp_path, "a")
    try:
        wait_for(leader.leads, 30, what="a to lead")
        wait_for(lambda: labelled(api, namespace, ["a"]) == ["a"], 30, what="the label on a")
        core.delete_namespaced_pod("a", namespace)
        assert core.read_namespaced_pod("a", namespace).metadata.deletion_timestamp
        began = time.monotonic()
        leader.signal(signal.SIGTERM)
        assert leader.wait(30) == 0
        took = time.monotonic() - began
        warned = [m for m in leader.messages() if "may still be on" in m]
        assert labelled(api, namespace, ["a"]) == [], leader.raw_log()[-3000:]
        assert not warned and took < 2.0, (took, warned, leader.raw_log()[-3000:])
    finally:
        leader.stop()
        core.patch_namespaced_pod("a", namespace, {"metadata": {"finalizers": None}})


def test_a_label_the_api_refuses_for_good_does_not_hold_up_the_release(
    cluster: ControlPlane, api: Any, namespace: str, tmp_path: Path, label_grant: None
) -> None:
    """``--label-leader`` on a pod whose account lacks the label's grant (the default
    account): every put is a 403, said once at start as an error. No retry within the
    settle budget can change that, so a stop does not wait it out before releasing
    (bench.pods' label workload ran so, and every leader deletion took 3 s longer)."""
    make_pod(api, namespace, "a", sa="default")
    extra = ("--label-leader", "--release=now")  # not waiting out valid_until: the label's part
    leader = pod_sidecar(cluster, api, namespace, tmp_path, "a", account="default", extra=extra)
    try:
        wait_for(leader.leads, 30, what="a to lead")
        wait_for(lambda: any("forbidden" in m for m in leader.messages()), 10, what="the 403 said")
        began = time.monotonic()
        leader.signal(signal.SIGTERM)
        assert leader.wait(30) == 0
        took = time.monotonic() - began
        assert took < 2.0, (took, leader.raw_log()[-3000:])
    finally:
        leader.stop()
