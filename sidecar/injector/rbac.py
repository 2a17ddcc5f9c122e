"""``--auto-rbac``: a Role and RoleBinding on Leases (and Events) for an injected pod's ServiceAccount.

Off by default: the injector must then hold, cluster-wide, every permission it
grants (Kubernetes forbids granting what one does not have). It runs from a
watch on annotated pods, never inside the admission request (``sideEffects:
None``, safe for dry runs); the sidecar retries on 403 until the binding exists.
Objects are created, never updated or deleted: a Role someone edited is theirs.
The leader label's Role (pods ``patch``) is granted only while the admission
policy that limits it, and its binding, exist, and never to ``default``: the
policy limits every pod update of the account it is bound to (contract §8).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from ..kit.logs import Logger
from ..kube.api import ADMISSION, RBAC, KubeApi, create, exists, path
from ..kube.errors import ApiError
from .annotations import LABEL_LEADER
from .metrics import InjectorMetrics

ROLE_NAME = "grelmicro-sidecar-leases"
LABEL_ROLE_NAME = "grelmicro-sidecar-leader-label"
#: The ValidatingAdmissionPolicy (and its binding) that limits the label Role.
LABEL_POLICY = "grelmicro-sidecar-leader-label"
LABEL_ACCOUNT_FIX = "serviceAccountName: grelmicro-sidecar (manifests/leader-label.yaml makes it)"
MANAGED_BY = {"app.kubernetes.io/managed-by": "grelmicro-sidecar-injector"}
VERBS = ["get", "list", "watch", "create", "update", "patch", "delete"]
EVENT_VERBS = ["create", "patch"]  # Events on the Lease (kubectl describe lease)
#: Each grant: its Role's name and rules. The label Role's marker rule names a resource
#: nothing else uses, which the policy of manifests/leader-label.yaml looks for.
# fmt: off
GRANTS: dict[str, tuple[str, list[dict[str, Any]]]] = {
    "leases": (ROLE_NAME, [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": VERBS},
        {"apiGroups": [""], "resources": ["events"], "verbs": EVENT_VERBS},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},  # being deleted? (§5)
    ]),
    "leader-label": (LABEL_ROLE_NAME, [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]},
        {"apiGroups": ["leader-election.grelmicro.io"], "resources": ["leaderlabels"],
         "verbs": ["set"]},
    ]),
}
# fmt: on


def _meta(name: str, namespace: str) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": dict(MANAGED_BY)}


def role(namespace: str, what: str = "leases") -> dict[str, Any]:
    name, rules = GRANTS[what]
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _meta(name, namespace),
        "rules": [dict(rule) for rule in rules],
    }


def binding_name(service_account: str, role_name: str = ROLE_NAME) -> str:
    return f"{role_name}-{service_account}"[:253]


def role_binding(
    namespace: str, service_account: str, role_name: str = ROLE_NAME
) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _meta(binding_name(service_account, role_name), namespace),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role_name},
        "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}],
    }


async def label_policy_exists(api: KubeApi) -> bool:
    """Whether the ValidatingAdmissionPolicy ``LABEL_POLICY`` and its binding exist."""
    for resource in ("validatingadmissionpolicies", "validatingadmissionpolicybindings"):
        if not await exists(api, path(ADMISSION, resource, None, LABEL_POLICY), f"get {resource}"):
            return False
    return True


class Grants:
    """The ``--auto-rbac`` pod watch's grants, once per ServiceAccount: each counted and
    logged; a refusal or a missing policy is one warning with the fix, retried on the
    next pod event."""

    def __init__(
        self, api: KubeApi, log: Logger, metrics: InjectorMetrics, excluded: Collection[str]
    ):
        self.api, self.log, self.metrics, self.excluded = api, log, metrics, excluded
        self.done: set[tuple[str, str, str]] = set()

    async def on_pod(self, body: Mapping[str, Any], type: str | None) -> None:
        """A watch event of an annotated pod: its ServiceAccount gets the Leases, and the
        leader label when the pod asks for it."""
        meta = body.get("metadata", {})
        namespace = meta.get("namespace")
        if type == "DELETED" or not namespace or namespace in self.excluded:
            return
        account = body.get("spec", {}).get("serviceAccountName") or "default"
        await self.ensure(namespace, account, "leases")
        if (meta.get("annotations") or {}).get(LABEL_LEADER) == "true":
            await self.ensure(namespace, account, "leader-label")

    async def ensure(self, namespace: str, account: str, what: str) -> None:
        """Grant ``what`` ("leases" or "leader-label") to the ServiceAccount, once."""
        if (namespace, account, what) in self.done:
            return
        key = f"rbac:{namespace}:{account}:{what}"
        where = {"namespace": namespace, "service_account": account}
        name = GRANTS[what][0]
        if what == "leader-label" and account == "default":
            self.log.once(
                key,
                "warning",
                "auto-rbac: a pod asks for the leader label but runs as the ServiceAccount "
                "default; not granting it (its policy would limit every pod that uses default)",
                **where,
                fix=f"run the pod as a ServiceAccount only such pods use: {LABEL_ACCOUNT_FIX}",
            )
            return
        try:
            if what == "leader-label" and not await label_policy_exists(self.api):
                self.log.once(
                    key,
                    "warning",
                    "auto-rbac: a pod asks for the leader label, but the admission policy "
                    f"{LABEL_POLICY} that limits it is not installed; not granting it",
                    **where,
                    fix="install the chart with leaderLabel.policy=true or apply "
                    "manifests/leader-label.yaml",
                )
                return
            created = 0
            for resource, body in (
                ("roles", role(namespace, what)),
                ("rolebindings", role_binding(namespace, account, name)),
            ):
                url = path(RBAC, resource, namespace)
                created += await create(self.api, url, f"create {resource}", body)
        except ApiError as err:
            self.log.once(
                key,
                "warning",
                "auto-rbac: cannot create the Role/RoleBinding",
                **where,
                error=str(err),
                fix="the injector must itself hold every verb it grants "
                "(or 'bind' and 'escalate' on roles) and create on roles/rolebindings",
            )
            return
        self.done.add((namespace, account, what))
        if created:
            self.metrics.rbac_created += created
            self.log.info(f"auto-rbac: granted {what} to a ServiceAccount", **where, role=name)
