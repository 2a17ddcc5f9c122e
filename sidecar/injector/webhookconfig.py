"""The MutatingWebhookConfiguration of the injector: its single definition.

The chart renders the same object (a test compares them) and the cluster tests
register the injector with it; change it here only. Why this shape (the blast radius):

- ``matchConditions`` (CEL on the ``inject`` annotation): the API server calls
  the webhook for annotated pods only, so an injector outage blocks no one else;
- ``failurePolicy: Fail``: while the injector is down an annotated pod is
  refused, not started without its sidecar (with no leader election at all);
- ``namespaceSelector`` leaves the excluded namespaces out entirely
  (``kube-system`` and the injector's own, so it can always be restarted);
- ``reinvocationPolicy: IfNeeded``: a container added by a later webhook gets
  the mount and env (never a second sidecar);
- ``sideEffects: None``: admission only computes a patch.

The deployer (chart or test) owns this object, not kopf: see ``operator``.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from typing import Any

from .annotations import INJECT

CONFIG_NAME = "grelmicro-sidecar-injector"
WEBHOOK_NAME = "inject.leader-election.grelmicro.io"
WEBHOOK_PATH = "/inject"
NAMESPACE_LABEL = "kubernetes.io/metadata.name"

#: CEL, guarded so a pod without annotations evaluates to false, never to an error.
MATCH_EXPRESSION = (
    "has(object.metadata.annotations) && "
    f"'{INJECT}' in object.metadata.annotations && "
    f"object.metadata.annotations['{INJECT}'] == 'true'"
)


def ca_bundle_of(pem: bytes) -> str:
    """The ``caBundle`` field for a PEM CA certificate (base64 of the PEM)."""
    return base64.b64encode(pem).decode("ascii")


def webhook_configuration(
    ca_bundle: str,
    *,
    url: str | None = None,
    service: Mapping[str, Any] | None = None,
    excluded_namespaces: Iterable[str] = ("kube-system",),
    name: str = CONFIG_NAME,
) -> dict[str, Any]:
    """The MutatingWebhookConfiguration as a dict.

    ``ca_bundle``: base64 of the PEM CA of the serving certificate (``ca_bundle_of``).
    Exactly one of ``url`` or ``service`` (``{"namespace", "name", "port" (443),
    "path" ("/inject")}``). ``excluded_namespaces`` are never sent to the webhook.
    """
    if (url is None) == (service is None):
        raise ValueError("give exactly one of url or service")
    client: dict[str, Any] = {"caBundle": ca_bundle}
    if service is None:
        client["url"] = url
    else:
        client["service"] = {
            "namespace": str(service["namespace"]),
            "name": str(service["name"]),
            "port": int(service.get("port", 443)),
            "path": str(service.get("path", WEBHOOK_PATH)),
        }
    excluded = sorted({n for n in excluded_namespaces if n})
    selector = {
        "matchExpressions": [{"key": NAMESPACE_LABEL, "operator": "NotIn", "values": excluded}]
    }
    # fmt: off
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "grelmicro-sidecar"}},
        "webhooks": [{
            "name": WEBHOOK_NAME,
            "admissionReviewVersions": ["v1"],
            "clientConfig": client,
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
                       "operations": ["CREATE"], "scope": "Namespaced"}],
            "matchConditions": [{"name": "inject-annotation-true", "expression": MATCH_EXPRESSION}],
            "namespaceSelector": selector if excluded else {},  # NotIn [] is invalid
            "failurePolicy": "Fail", "sideEffects": "None", "timeoutSeconds": 10,
            "reinvocationPolicy": "IfNeeded", "matchPolicy": "Equivalent",
        }],
    }
    # fmt: on
