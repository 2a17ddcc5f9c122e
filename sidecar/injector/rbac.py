"""``--auto-rbac``: a Role and RoleBinding on Leases (and Events) for an injected pod's ServiceAccount.

Off by default: it needs the injector to hold the very permissions it grants
(Kubernetes forbids granting what one does not have), cluster-wide, which a
cluster admin may not want. When on, it runs from a watch on annotated pods,
never inside the admission request: the webhook stays free of side effects
(``sideEffects: None``, safe for dry runs). The sidecar retries on 403, so
the few hundred milliseconds before the binding exists only cost a retry.

Objects are created, never updated or deleted: a Role someone edited is theirs.
"""

from __future__ import annotations

from typing import Any, Protocol

ROLE_NAME = "grelmicro-sidecar-leases"
MANAGED_BY = {"app.kubernetes.io/managed-by": "grelmicro-sidecar-injector"}
VERBS = ["get", "list", "watch", "create", "update", "patch", "delete"]
EVENT_VERBS = ["create", "patch"]  # Events on the Lease (kubectl describe lease)


class CreateApi(Protocol):
    async def create_rbac(self, namespace: str, resource: str, body: dict[str, Any]) -> bool: ...


def role(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": ROLE_NAME, "namespace": namespace, "labels": dict(MANAGED_BY)},
        "rules": [
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": VERBS},
            {"apiGroups": [""], "resources": ["events"], "verbs": EVENT_VERBS},
        ],
    }


def binding_name(service_account: str) -> str:
    return f"{ROLE_NAME}-{service_account}"[:253]


def role_binding(namespace: str, service_account: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {
            "name": binding_name(service_account),
            "namespace": namespace,
            "labels": dict(MANAGED_BY),
        },
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ROLE_NAME},
        "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}],
    }


async def ensure(api: CreateApi, namespace: str, service_account: str) -> int:
    """Create the Role and the RoleBinding when absent; the number created."""
    created = 0
    created += await api.create_rbac(namespace, "roles", role(namespace))
    created += await api.create_rbac(
        namespace, "rolebindings", role_binding(namespace, service_account)
    )
    return created
