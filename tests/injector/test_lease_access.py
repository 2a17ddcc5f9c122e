"""A pod whose ServiceAccount may not use Leases is refused at creation with the fix (leaseaccess).

Against the real API server: its authorizer answers the SubjectAccessReviews,
its admission chain prints the refusal as ``kubectl`` users see it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from sidecar.injector.rbac import role, role_binding
from tests.cluster import ControlPlane
from tests.ship.tools import service_account_kubeconfig

from .conftest import Injector, Tls, annotated_pod, register, unregister


def _create(api: Any, namespace: str, name: str) -> ApiException | None:
    try:
        client.CoreV1Api(api).create_namespaced_pod(namespace, annotated_pod(name), dry_run="All")
    except ApiException as err:
        return err
    return None


def test_a_pod_without_lease_rbac_is_refused_with_the_command_then_admitted(
    api: Any, cluster: ControlPlane, tls: Tls, namespace: str, tmp_path: Path
) -> None:
    injector = Injector(
        cluster,
        tls,
        tmp_path / "injector.log",
        "--check-lease-access=true",
        "--lease-cluster-role=grelmicro-sidecar-leases",
    ).start()
    reg = register(api, injector.url, tls.ca_pem, namespace).name
    try:
        refused = _create(api, namespace, "no-rbac")
        assert refused is not None and refused.status == 400, refused
        message = json.loads(refused.body)["message"]
        assert (
            f"ServiceAccount {namespace}/default may not get, list, watch, create, update, patch, "
            f"delete leases (coordination.k8s.io) in namespace {namespace}, so the injected "
            "sidecar could never elect a leader; grant it, then create the pod again: "
            f"kubectl create rolebinding grelmicro-sidecar --namespace {namespace} "
            f"--clusterrole=grelmicro-sidecar-leases --serviceaccount={namespace}:default"
        ) in message, message
        # The fix, as a user applies it (manifests/rbac.yaml's rules): the next pod goes in.
        rbac = client.RbacAuthorizationV1Api(api)
        rbac.create_namespaced_role(namespace, role(namespace))
        rbac.create_namespaced_role_binding(namespace, role_binding(namespace, "default"))
        assert _create(api, namespace, "with-rbac") is None
        assert "denied a pod" in injector.log.read_text()
    finally:
        unregister(api, reg)
        injector.stop()


def test_an_injector_that_cannot_ask_admits_and_says_so_once(
    api: Any, cluster: ControlPlane, tls: Tls, namespace: str, tmp_path: Path
) -> None:
    """Its own account lacks SubjectAccessReviews: the check must never block a pod."""
    core = client.CoreV1Api(api)
    core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="weak"))
    )
    kubeconfig = service_account_kubeconfig(cluster, namespace, "weak", tmp_path / "kc")
    injector = Injector(
        cluster,
        tls,
        tmp_path / "injector.log",
        "--check-lease-access=true",
        kubeconfig=kubeconfig,
    ).start()
    reg = register(api, injector.url, tls.ca_pem, namespace).name
    try:
        for name in ("a", "b"):
            assert _create(api, namespace, name) is None
        log = injector.log.read_text()
        assert log.count("cannot check the Lease permissions of injected pods") == 1, log
    finally:
        unregister(api, reg)
        injector.stop()
