"""ServiceAccounts, tokens, the leases Role and kubeconfigs, as tests need them (test support).

The sidecar in a pod authenticates as its ServiceAccount with a token; these
helpers make the same thing happen against the embedded control plane, so the
RBAC and token paths are exercised for real, not with the admin certificate.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from kubernetes import client

from tests.cluster import ControlPlane

LEASE_VERBS = ["get", "list", "watch", "create", "update", "patch", "delete"]


def service_account(api: Any, namespace: str, name: str = "elector") -> str:
    """Create a ServiceAccount; its uid."""
    sa = client.CoreV1Api(api).create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name))
    )
    return str(sa.metadata.uid)


def token(
    api: Any,
    namespace: str,
    sa: str = "elector",
    bound_to_secret: str | None = None,
    bound_to_pod: str | None = None,
) -> str:
    """A TokenRequest token for ``sa``; bound to a Secret (dies with it) when one is named.

    ``bound_to_pod``: bound to that pod, as the kubelet's projected tokens are; the
    API server then puts the pod's name in the user's extra information.
    """
    core = client.CoreV1Api(api)
    spec = client.V1TokenRequestSpec(audiences=[])
    if bound_to_pod is not None:
        uid = core.read_namespaced_pod(bound_to_pod, namespace).metadata.uid
        spec.bound_object_ref = client.V1BoundObjectReference(
            api_version="v1", kind="Pod", name=bound_to_pod, uid=uid
        )
    if bound_to_secret is not None:
        core.create_namespaced_secret(
            namespace, client.V1Secret(metadata=client.V1ObjectMeta(name=bound_to_secret))
        )
        uid = core.read_namespaced_secret(bound_to_secret, namespace).metadata.uid
        spec.bound_object_ref = client.V1BoundObjectReference(
            api_version="v1", kind="Secret", name=bound_to_secret, uid=uid
        )
    request = client.AuthenticationV1TokenRequest(spec=spec)
    return str(core.create_namespaced_service_account_token(sa, namespace, request).status.token)


def grant(
    api: Any, namespace: str, sa: str, name: str, group: str, resource: str, verbs: list[str]
) -> None:
    """A Role ``name`` allowing ``verbs`` on ``resource``, bound to ServiceAccount ``sa``."""
    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_namespaced_role(
        namespace,
        client.V1Role(
            metadata=client.V1ObjectMeta(name=name),
            rules=[client.V1PolicyRule(api_groups=[group], resources=[resource], verbs=verbs)],
        ),
    )
    rbac.create_namespaced_role_binding(
        namespace,
        client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name=name),
            role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="Role", name=name
            ),
            subjects=[client.RbacV1Subject(kind="ServiceAccount", name=sa, namespace=namespace)],
        ),
    )


def grant_leases(api: Any, namespace: str, sa: str = "elector") -> None:
    """The Role the sidecar needs (contract §8) and its binding to ``sa``."""
    grant(api, namespace, sa, "leases", "coordination.k8s.io", "leases", LEASE_VERBS)
    wait_until_allowed(api, namespace, f"system:serviceaccount:{namespace}:{sa}", LEASE_VERBS)


def wait_until_allowed(
    api: Any,
    namespace: str,
    user: str,
    verbs: list[str],
    timeout: float = 30.0,
    group: str = "coordination.k8s.io",
    resource: str = "leases",
) -> None:
    """Return once the API server's authorizer lets ``user`` use ``resource`` with every verb.

    The RBAC authorizer reads Roles from a watch cache, so a grant takes effect a
    moment after it is written (longer on a loaded machine); a sidecar started
    in that moment is refused with a 403 it rightly reports as an error. A
    SubjectAccessReview asks that same authorizer.
    """
    deadline = time.monotonic() + timeout
    pending = list(verbs)
    while pending:
        if may(api, namespace, user, pending[0], group, resource):
            pending.pop(0)
        elif time.monotonic() > deadline:
            raise TimeoutError(f"{user} still may not {pending[0]} {resource} in {namespace}")
        else:
            time.sleep(0.05)


def may(
    api: client.ApiClient,
    namespace: str,
    user: str,
    verb: str,
    group: str = "coordination.k8s.io",
    resource: str = "leases",
) -> bool:
    """Whether the API server's authorizer lets ``user`` (a service account) ``verb`` now."""
    review = client.AuthorizationV1Api(api).create_subject_access_review(
        client.V1SubjectAccessReview(
            spec=client.V1SubjectAccessReviewSpec(
                user=user,
                groups=["system:serviceaccounts", f"system:serviceaccounts:{namespace}"],
                resource_attributes=client.V1ResourceAttributes(
                    namespace=namespace, group=group, resource=resource, verb=verb
                ),
            )
        )
    )
    return bool(review.status.allowed)


def token_client(cluster: ControlPlane, bearer: str) -> client.ApiClient:
    """An official-client ApiClient that authenticates with ``bearer``."""
    cfg = client.Configuration()
    cfg.host = cluster.server
    cfg.ssl_ca_cert = str(cluster.ca_file)
    cfg.api_key = {"authorization": f"Bearer {bearer}"}
    return client.ApiClient(cfg)


def kubeconfig(
    path: Path,
    server: str,
    ca_file: Path,
    user: dict[str, Any],
    namespace: str | None = None,
) -> Path:
    """A one-context kubeconfig (JSON, which is YAML too) with ``user``'s credentials."""
    context: dict[str, Any] = {"cluster": "c", "user": "u"}
    if namespace:
        context["namespace"] = namespace
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "x",
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {"server": server, "certificate-authority": str(ca_file)},
                    }
                ],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "x", "context": context}],
            }
        )
    )
    return path


def lease_list_status(cluster: ControlPlane, namespace: str, bearer: str) -> int:
    """What the API server answers a Lease list made with ``bearer`` (200, 401, 403...)."""
    with token_client(cluster, bearer) as api_client:
        try:
            client.CoordinationV1Api(api_client).list_namespaced_lease(namespace)
        except client.ApiException as err:
            return int(err.status)
    return 200


def token_kubeconfig(
    path: Path, api: Any, cluster: ControlPlane, namespace: str, sa: str = "elector"
) -> Path:
    """A kubeconfig that authenticates as ServiceAccount ``sa`` with a fresh token."""
    return kubeconfig(
        path, cluster.server, cluster.ca_file, {"token": token(api, namespace, sa)}, namespace
    )


def exec_plugin_user(
    directory: Path, bearer: str, version: str = "v1", calls: Path | None = None
) -> dict[str, Any]:
    """A kubeconfig user whose exec credential plugin (a shell script) prints ``bearer``.

    What EKS, GKE and AKS write; ``calls`` gets a line each time the plugin runs.
    """
    api_version = f"client.authentication.k8s.io/{version}"
    credential = {"apiVersion": api_version, "kind": "ExecCredential", "status": {"token": bearer}}
    plugin = directory / "get-token"
    count = f"echo x >> {calls}\n" if calls is not None else ""
    plugin.write_text(f"#!/bin/sh\n{count}cat <<'EOF'\n{json.dumps(credential)}\nEOF\n")
    plugin.chmod(0o755)
    return {"exec": {"apiVersion": api_version, "command": str(plugin), "interactiveMode": "Never"}}
