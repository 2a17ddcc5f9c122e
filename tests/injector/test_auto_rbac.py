"""``--auto-rbac``: the ServiceAccount of an injected pod can use Leases without a hand-made Role."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests import accounts
from tests.cluster import ControlPlane

from .conftest import Injector, Registration, Tls, annotated_pod, register, unregister

ROOT = Path(__file__).resolve().parents[2]
MANAGED = {"app.kubernetes.io/managed-by": "grelmicro"}


def _lease(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": MANAGED}, "spec": {"holderIdentity": "x"}}


def test_auto_rbac_grants_the_pods_service_account_the_lease_verbs(
    cluster: ControlPlane, api: Any, namespace: str, tls: Tls, tmp_path: Path
) -> None:
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "elector"}})
    as_sa = client.CoordinationV1Api(accounts.token_client(cluster, accounts.token(api, namespace)))
    with pytest.raises(ApiException) as err:  # nothing granted yet
        as_sa.create_namespaced_lease(namespace, _lease("leader-before"))
    assert err.value.status == 403

    own = Injector(cluster, tls, tmp_path / "injector.log", "--auto-rbac=true").start()
    reg = register(api, own.url, tls.ca_pem, namespace)
    try:
        core.create_namespaced_pod(namespace, annotated_pod("app", serviceAccountName="elector"))
        deadline = time.monotonic() + 30
        while True:  # a watch event, then two creates, then the authorizer's cache
            try:
                as_sa.create_namespaced_lease(namespace, _lease("leader-after"))
                break
            except ApiException as e:
                assert e.status == 403 and time.monotonic() < deadline, own.tail()
                time.sleep(0.2)
        roles = [r.metadata.name for r in rbac.list_namespaced_role(namespace).items]
        bindings = rbac.list_namespaced_role_binding(namespace).items
        assert roles == ["grelmicro-sidecar-leases"]
        assert [(b.metadata.name, [s.name for s in b.subjects]) for b in bindings] == [
            ("grelmicro-sidecar-leases-elector", ["elector"])
        ]
        assert own.metrics()["grelmicro_injector_rbac_objects_created_total"] == 2
    finally:
        own.stop()
        unregister(api, reg.name)


def test_without_auto_rbac_nothing_is_granted(
    api: Any, namespace: str, webhook: Registration
) -> None:
    client.CoreV1Api(api).create_namespaced_pod(namespace, annotated_pod("app"))
    time.sleep(1)
    assert client.RbacAuthorizationV1Api(api).list_namespaced_role(namespace).items == []


LABEL_GRANT = {
    ("Role", "grelmicro-sidecar-leader-label"),
    ("RoleBinding", "grelmicro-sidecar-leader-label-elector"),
}


def _label_grant(api: Any, namespace: str) -> set[tuple[str, str]]:
    rbac = client.RbacAuthorizationV1Api(api)
    found = {("Role", r.metadata.name) for r in rbac.list_namespaced_role(namespace).items}
    found |= {
        ("RoleBinding", b.metadata.name) for b in rbac.list_namespaced_role_binding(namespace).items
    }
    return found & LABEL_GRANT


def test_auto_rbac_grants_the_leader_label_only_with_its_admission_policy(
    cluster: ControlPlane, api: Any, namespace: str, tls: Tls, tmp_path: Path
) -> None:
    """Contract §8: pods patch without the policy would let the ServiceAccount patch any pod."""
    policy = ROOT / "manifests" / "leader-label.yaml"
    policy_only = "\n---\n".join(
        doc for doc in policy.read_text().split("\n---\n") if "AdmissionPolicy" in doc
    )
    cluster.kubectl("delete", "--ignore-not-found", "-f", "-", input=policy_only)
    core = client.CoreV1Api(api)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "elector"}})
    own = Injector(cluster, tls, tmp_path / "injector.log", "--auto-rbac=true").start()
    reg = register(api, own.url, tls.ca_pem, namespace)
    label = {"leader-election.grelmicro.io/label-leader": "true"}
    try:
        core.create_namespaced_pod(
            namespace, annotated_pod("app", label, serviceAccountName="elector")
        )
        deadline = time.monotonic() + 30
        while "is not installed" not in own.tail():
            assert time.monotonic() < deadline, own.tail()
            time.sleep(0.2)
        assert _label_grant(api, namespace) == set()

        cluster.kubectl("apply", "-f", "-", input=policy_only)
        # Any later event of such a pod grants it now.
        core.create_namespaced_pod(
            namespace, annotated_pod("app2", label, serviceAccountName="elector")
        )
        deadline = time.monotonic() + 30
        while _label_grant(api, namespace) != LABEL_GRANT:
            assert time.monotonic() < deadline, own.tail()
            time.sleep(0.2)
        role = client.RbacAuthorizationV1Api(api).read_namespaced_role(
            "grelmicro-sidecar-leader-label", namespace
        )
        manifest_role = next(
            d for d in yaml.safe_load_all(policy.read_text()) if d["kind"] == "Role"
        )
        assert [(r.api_groups, r.resources, r.verbs) for r in role.rules] == [
            (r["apiGroups"], r["resources"], r["verbs"]) for r in manifest_role["rules"]
        ]
        # Never to `default`: the policy would limit every pod of the namespace on it.
        core.create_namespaced_pod(namespace, annotated_pod("app3", label))
        deadline = time.monotonic() + 30
        while "runs as the ServiceAccount default" not in own.tail():
            assert time.monotonic() < deadline, own.tail()
            time.sleep(0.2)
        bindings = client.RbacAuthorizationV1Api(api).list_namespaced_role_binding(namespace)
        names = {b.metadata.name for b in bindings.items}
        assert "grelmicro-sidecar-leases-default" in names  # the Leases, as for any pod
        assert "grelmicro-sidecar-leader-label-default" not in names
    finally:
        own.stop()
        unregister(api, reg.name)
        # Cluster-wide: gone again, so that a chart installed later owns its own.
        cluster.kubectl("delete", "--ignore-not-found", "-f", "-", input=policy_only)
