"""``--auto-rbac``: a Role and RoleBinding on Leases (and Events) for an injected pod's ServiceAccount.

Off by default: it needs the injector to hold the very permissions it grants
(Kubernetes forbids granting what one does not have), cluster-wide, which a
cluster admin may not want. When on, it runs from a watch on annotated pods,
never inside the admission request: the webhook stays free of side effects
(``sideEffects: None``, safe for dry runs). The sidecar retries on 403, so
the few hundred milliseconds before the binding exists only cost a retry.

Objects are created, never updated or deleted: a Role someone edited is theirs.

The leader label (``label-leader``) needs ``patch`` on pods, which only the
admission policy of ``manifests/leader-label.yaml`` keeps to that one label on
the sidecar's own pod. So its Role is granted only while that policy and its
binding exist: without them the grant would let the ServiceAccount patch any
pod of its namespace.
"""

from __future__ import annotations

from typing import Any, Protocol

ROLE_NAME = "grelmicro-sidecar-leases"
MANAGED_BY = {"app.kubernetes.io/managed-by": "grelmicro-sidecar-injector"}
VERBS = ["get", "list", "watch", "create", "update", "patch", "delete"]
EVENT_VERBS = ["create", "patch"]  # Events on the Lease (kubectl describe lease)
LABEL_ROLE_NAME = "grelmicro-sidecar-leader-label"
#: The ValidatingAdmissionPolicy (and its binding) that limits the label Role.
LABEL_POLICY = "grelmicro-sidecar-leader-label"
#: The marker the policy looks for: a resource nothing else uses (manifests/leader-label.yaml).
LABEL_MARKER = {
    "apiGroups": ["leader-election.grelmicro.io"],
    "resources": ["leaderlabels"],
    "verbs": ["set"],
}


class CreateApi(Protocol):
    async def create_rbac(self, namespace: str, resource: str, body: dict[str, Any]) -> bool: ...

    async def label_policy_exists(self, name: str) -> bool: ...


def _role(name: str, namespace: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(MANAGED_BY)},
        "rules": rules,
    }


def role(namespace: str) -> dict[str, Any]:
    return _role(
        ROLE_NAME,
        namespace,
        [
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": VERBS},
            {"apiGroups": [""], "resources": ["events"], "verbs": EVENT_VERBS},
        ],
    )


def label_role(namespace: str) -> dict[str, Any]:
    return _role(
        LABEL_ROLE_NAME,
        namespace,
        [{"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]}, dict(LABEL_MARKER)],
    )


def binding_name(service_account: str, role_name: str = ROLE_NAME) -> str:
    return f"{role_name}-{service_account}"[:253]


def role_binding(
    namespace: str, service_account: str, role_name: str = ROLE_NAME
) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {
            "name": binding_name(service_account, role_name),
            "namespace": namespace,
            "labels": dict(MANAGED_BY),
        },
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role_name},
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


async def ensure_label(api: CreateApi, namespace: str, service_account: str) -> int | None:
    """The leader label's Role and RoleBinding, when the policy that limits them exists.

    The number created; None (nothing granted) when the policy or its binding is missing.
    """
    if not await api.label_policy_exists(LABEL_POLICY):
        return None
    created = 0
    created += await api.create_rbac(namespace, "roles", label_role(namespace))
    created += await api.create_rbac(
        namespace, "rolebindings", role_binding(namespace, service_account, LABEL_ROLE_NAME)
    )
    return created
