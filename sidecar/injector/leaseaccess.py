"""Whether an injected pod's ServiceAccount may use Leases in its namespace, asked at admission.

A sidecar without its Lease permissions runs and never elects (it logs 403 and
retries). The injector asks first, with a SubjectAccessReview per verb the
sidecar uses, and a pod whose account lacks one is refused with one line that
names the command granting them: the user learns it when creating the pod, not
from a sidecar's log. Guarantees:

- one account is asked about once at a time: the pods of a burst (a new
  Deployment's replicas) wait for the same answer, not one set of reviews each;
- a "yes" is remembered for ``TTL`` per (namespace, account); a "no" is never
  remembered, so the pod created right after the fix is admitted;
- a review that cannot be made (the API server slow or down, the injector's
  own permission missing) admits the pod: this check never blocks what the
  permissions would allow; the failure is logged once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from ..kit.logs import Logger
from ..kube.api import KubeApi
from ..kube.errors import ApiError
from .rbac import VERBS

REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
#: How long a "yes" is trusted: RBAC taken away meanwhile is the sidecar's 403 again.
TTL = 300.0
#: An admission has 10 s in all by default; the reviews get at most this much of it.
TIMEOUT = 2.0


def review(namespace: str, account: str, verb: str) -> dict[str, object]:
    """The SubjectAccessReview of ``verb`` on Leases in ``namespace`` for ``account``'s tokens."""
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{namespace}:{account}",
            "groups": [
                "system:serviceaccounts",
                f"system:serviceaccounts:{namespace}",
                "system:authenticated",
            ],
            "resourceAttributes": {
                "namespace": namespace,
                "verb": verb,
                "group": "coordination.k8s.io",
                "resource": "leases",
            },
        },
    }


def fix(namespace: str, account: str, cluster_role: str) -> str:
    """The one command (or file) that grants what the sidecar needs."""
    if cluster_role:
        return (
            f"kubectl create rolebinding grelmicro-sidecar --namespace {namespace} "
            f"--clusterrole={cluster_role} --serviceaccount={namespace}:{account}"
        )
    return f"kubectl apply --namespace {namespace} -f manifests/rbac.yaml (it binds default)"


class LeaseAccess:
    """``missing(namespace, account)``: the refusal's text, or None when the pod may go."""

    def __init__(
        self,
        api: KubeApi,
        cluster_role: str,
        log: Logger,
        monotonic: Callable[[], float] = time.monotonic,
    ):
        self.api, self.cluster_role, self.log, self.monotonic = api, cluster_role, log, monotonic
        self.allowed_until: dict[tuple[str, str], float] = {}
        self._asking: dict[tuple[str, str], asyncio.Future[str | None]] = {}

    async def missing(self, namespace: str, account: str) -> str | None:
        key = (namespace, account)
        if self.allowed_until.get(key, 0.0) > self.monotonic():
            return None
        asking = self._asking.get(key)
        if asking is None:
            asking = self._asking[key] = asyncio.ensure_future(self._ask(namespace, account))
            asking.add_done_callback(lambda _: self._asking.pop(key, None))
        return await asyncio.shield(asking)  # one pod's timeout does not cancel the others'

    async def _ask(self, namespace: str, account: str) -> str | None:
        denied = []
        try:
            for verb in VERBS:
                answer = await self.api.call(
                    "POST", REVIEWS, "create subjectaccessreviews",
                    review(namespace, account, verb), TIMEOUT,
                )  # fmt: skip
                if not ((answer or {}).get("status") or {}).get("allowed"):
                    denied.append(verb)
        except ApiError as err:
            self.log.once(
                "lease-access:error",
                "warning",
                "cannot check the Lease permissions of injected pods; admitting them unchecked",
                error=str(err),
            )
            return None
        self.log.forget("lease-access:error")
        if not denied:
            self.allowed_until[(namespace, account)] = self.monotonic() + TTL
            return None
        return (
            f"ServiceAccount {namespace}/{account} may not {', '.join(denied)} leases "
            f"(coordination.k8s.io) in namespace {namespace}, so the injected sidecar could "
            f"never elect a leader; grant it, then create the pod again: "
            f"{fix(namespace, account, self.cluster_role)}"
        )
