"""AdmissionReview v1 in, AdmissionReview v1 out, for ``POST /inject``. Pure.

Guarantees: ``answer`` never raises and always returns a well-formed
AdmissionReview response carrying the request's ``uid``: the decision of
``patch.decide`` as a base64 JSONPatch, or ``allowed: false`` with a 400
status whose message is what ``kubectl`` prints. A request that is not a Pod
CREATE (the configuration never sends one) is allowed unchanged.

Not kopf's ``@kopf.on.mutate`` engine: it deep-copies and diffs every pod to
find the patch that ``decide`` yields directly, many times the work, and under
a burst of pod creations each request's work is queueing for the others
(``bench/injector_latency.py``). kopf still runs the server, login and watches.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Collection, Mapping
from typing import Any

from .patch import Decision, SidecarSpec, decide


def _response(uid: str, allowed: bool, **extra: Any) -> dict[str, Any]:
    response = {"uid": uid, "allowed": allowed, **extra}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


def refused(uid: str, message: str, **reason: str) -> dict[str, Any]:
    """A refusal: ``message`` is what ``kubectl`` prints after "denied the request: "."""
    return _response(uid, False, status={"code": 400, **reason, "message": message})


def answer(
    review: Any,
    spec: SidecarSpec,
    excluded_namespaces: Collection[str] = (),
    opted_in: bool = False,
) -> tuple[dict[str, Any], Decision | None]:
    """(the AdmissionReview response, the decision when a pod was judged).

    ``opted_in``: it came through the namespace webhook (``patch.decide``). A pod in an
    excluded namespace is allowed unchanged even if a hand-edited
    configuration sends it here: exclusion does not depend on the deployer alone.
    """
    request = review.get("request") if isinstance(review, Mapping) else None
    if not isinstance(request, Mapping):
        return refused("", "not an AdmissionReview v1: no request"), None
    uid = str(request.get("uid", ""))
    resource = request.get("resource")
    kind = (
        (resource.get("group"), resource.get("resource")) if isinstance(resource, Mapping) else ()
    )
    if request.get("operation") != "CREATE" or kind != ("", "pods") or request.get("subResource"):
        return _response(uid, True), None
    if request.get("namespace") in excluded_namespaces:
        return _response(uid, True), Decision("skipped")
    pod = request.get("object")
    if not isinstance(pod, Mapping):
        return refused(uid, "the AdmissionReview has no pod object"), None
    decision = decide(pod, spec, opted_in)
    if decision.outcome == "denied":
        return refused(uid, decision.message, reason="BadRequest"), decision
    if not decision.changes:
        return _response(uid, True), decision
    ops = json.dumps(decision.json_patch(), separators=(",", ":")).encode()
    patch = base64.b64encode(ops).decode("ascii")
    return _response(uid, True, patchType="JSONPatch", patch=patch), decision
