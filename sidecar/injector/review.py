"""AdmissionReview v1 in, AdmissionReview v1 out, for ``POST /inject``. Pure.

Guarantees: ``answer`` never raises and always returns a well-formed
AdmissionReview response carrying the request's ``uid``: the decision of
``patch.decide`` as a base64 JSONPatch, or ``allowed: false`` with a 400
status whose message is what ``kubectl`` prints. A request that is not a Pod
CREATE (the configuration never sends one) is allowed unchanged.

Why the injector answers the review itself rather than through kopf's
``@kopf.on.mutate`` engine: kopf computes a handler's patch by deep-copying
the whole pod and diffing it against the patched copy (``jsonpatch.from_diff``),
about 2 ms of CPU per request here, while ``decide`` already yields the JSON
patch ops in tens of microseconds. At 50 pod creations in flight every
millisecond per request is queueing for the others (see
``bench/injector_latency.py``), so the engine is skipped on this path; kopf
still runs the server (TLS, certificate reload), login and the watches.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Collection, Mapping
from typing import Any

from .patch import Decision, SidecarSpec, decide

API_VERSION = "admission.k8s.io/v1"


def _response(uid: str, allowed: bool, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "AdmissionReview",
        "response": {"uid": uid, "allowed": allowed, **extra},
    }


def answer(
    review: Any, spec: SidecarSpec, excluded_namespaces: Collection[str] = ()
) -> tuple[dict[str, Any], Decision | None]:
    """(the AdmissionReview response, the decision when a pod was judged).

    A pod in an excluded namespace is allowed unchanged even if a hand-edited
    configuration sends it here: exclusion does not depend on the deployer alone.
    """
    request = review.get("request") if isinstance(review, Mapping) else None
    if not isinstance(request, Mapping):
        return _response(
            "",
            False,
            status={"code": 400, "message": "not an AdmissionReview v1: no request"},
        ), None
    uid = str(request.get("uid", ""))
    resource = request.get("resource")
    is_pod = isinstance(resource, Mapping) and (
        resource.get("group"),
        resource.get("resource"),
    ) == ("", "pods")
    if request.get("operation") != "CREATE" or not is_pod or request.get("subResource"):
        return _response(uid, True), None
    if request.get("namespace") in excluded_namespaces:
        return _response(uid, True), Decision("skipped")
    pod = request.get("object")
    if not isinstance(pod, Mapping):
        return _response(
            uid, False, status={"code": 400, "message": "the AdmissionReview has no pod object"}
        ), None
    decision = decide(pod, spec)
    if decision.outcome == "denied":
        return _response(
            uid,
            False,
            status={"code": 400, "reason": "BadRequest", "message": decision.message},
        ), decision
    if not decision.changes:
        return _response(uid, True), decision
    patch = base64.b64encode(
        json.dumps(decision.json_patch(), separators=(",", ":")).encode()
    ).decode("ascii")
    return _response(uid, True, patchType="JSONPatch", patch=patch), decision
