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

from typing import Any

from ..kit.logs import Logger
from ..kube.api import ADMISSION, RBAC, KubeApi, create, exists, path
from ..kube.errors import ApiError
from .metrics import InjectorMetrics

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


async def _create(api: KubeApi, namespace: str, resource: str, body: dict[str, Any]) -> int:
    """POST a ``roles`` or ``rolebindings`` object: 1 when created, 0 when it existed."""
    return int(await create(api, path(RBAC, resource, namespace), f"create {resource}", body))


async def ensure(api: KubeApi, namespace: str, service_account: str) -> int:
    """Create the Role and the RoleBinding when absent; the number created."""
    created = await _create(api, namespace, "roles", role(namespace))
    created += await _create(
        api, namespace, "rolebindings", role_binding(namespace, service_account)
    )
    return created


async def label_policy_exists(api: KubeApi, name: str = LABEL_POLICY) -> bool:
    """Whether the ValidatingAdmissionPolicy ``name`` and its binding of that name exist."""
    for resource in ("validatingadmissionpolicies", "validatingadmissionpolicybindings"):
        if not await exists(api, path(ADMISSION, resource, None, name), f"get {resource}"):
            return False
    return True


async def ensure_label(api: KubeApi, namespace: str, service_account: str) -> int | None:
    """The leader label's Role and RoleBinding, when the policy that limits them exists.

    The number created; None (nothing granted) when the policy or its binding is missing.
    """
    if not await label_policy_exists(api):
        return None
    created = await _create(api, namespace, "roles", label_role(namespace))
    created += await _create(
        api, namespace, "rolebindings", role_binding(namespace, service_account, LABEL_ROLE_NAME)
    )
    return created


class Grants:
    """The grants of the ``--auto-rbac`` pod watch: once per ServiceAccount, each logged.

    What was granted is counted and logged once; a refusal or a missing policy
    is one warning with the fix (per ServiceAccount), and is tried again on the
    next pod event.
    """

    def __init__(self, api: KubeApi, log: Logger, metrics: InjectorMetrics):
        self.api = api
        self.log = log
        self.metrics = metrics
        self.done: set[tuple[str, str, str]] = set()

    async def ensure(self, namespace: str, account: str, what: str) -> None:
        """Grant ``what`` ("leases" or "leader-label") to the ServiceAccount, once."""
        if (namespace, account, what) in self.done:
            return
        key = f"rbac:{namespace}:{account}:{what}"
        try:
            if what == "leases":
                created: int | None = await ensure(self.api, namespace, account)
            else:
                created = await ensure_label(self.api, namespace, account)
        except ApiError as err:
            self.log.once(
                key,
                "warning",
                "auto-rbac: cannot create the Role/RoleBinding",
                namespace=namespace,
                service_account=account,
                error=str(err),
                fix="the injector must itself hold every verb it grants "
                "(or 'bind' and 'escalate' on roles) and create on roles/rolebindings",
            )
            return
        if created is None:
            self.log.once(
                key,
                "warning",
                "auto-rbac: a pod asks for the leader label, but the admission policy "
                f"{LABEL_POLICY} that limits it is not installed; not granting it",
                namespace=namespace,
                service_account=account,
                fix="install the chart with leaderLabel.policy=true or apply "
                "manifests/leader-label.yaml",
            )
            return
        self.done.add((namespace, account, what))
        if created:
            self.metrics.rbac_created += created
            self.log.info(
                f"auto-rbac: granted {what} to a ServiceAccount",
                namespace=namespace,
                service_account=account,
                role=ROLE_NAME if what == "leases" else LABEL_ROLE_NAME,
            )
