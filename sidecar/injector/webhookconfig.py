"""The MutatingWebhookConfiguration of the injector: its single definition.

The chart renders the same object (a test compares them) and the cluster tests
register the injector with it; change it here only. Why this shape (the blast radius):

- two webhooks, one door each: ``inject.…`` for pods annotated ``inject: "true"``
  outside opted-in namespaces, ``namespace.…`` for every pod of a namespace
  labelled ``inject=enabled`` but those annotated ``inject: "false"`` (as
  Istio's ``istio-injection=enabled``); they never both see a pod;
- ``matchConditions`` (CEL on the ``inject`` annotation): the API server calls
  the webhook for those pods only, so an injector outage blocks no one else;
- ``failurePolicy: Fail`` (the default, a setting): while the injector is down
  an annotated pod is refused, not started without its sidecar (with no leader
  election at all);
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

from .annotations import INJECT, NAMESPACE_ENABLED, NAMESPACE_LABEL

CONFIG_NAME = "grelmicro-sidecar-injector"
WEBHOOK_NAME = "inject.leader-election.grelmicro.io"
NAMESPACE_WEBHOOK_NAME = "namespace.leader-election.grelmicro.io"
WEBHOOK_PATH = "/inject"
NAMESPACE_PATH = "/inject-namespace"
NAME_LABEL = "kubernetes.io/metadata.name"


def _annotation_is(value: str) -> str:
    """CEL, guarded so a pod without annotations evaluates to false, never to an error."""
    return (
        "has(object.metadata.annotations) && "
        f"'{INJECT}' in object.metadata.annotations && "
        f"object.metadata.annotations['{INJECT}'] == '{value}'"
    )


MATCH_EXPRESSION = _annotation_is("true")
OPT_OUT_EXPRESSION = f"!({_annotation_is('false')})"


def ca_bundle_of(pem: bytes) -> str:
    """The ``caBundle`` field for a PEM CA certificate (base64 of the PEM)."""
    return base64.b64encode(pem).decode("ascii")


def webhook_configuration(
    ca_bundle: str | None,
    *,
    url: str | None = None,
    service: Mapping[str, Any] | None = None,
    excluded_namespaces: Iterable[str] = ("kube-system",),
    name: str = CONFIG_NAME,
    failure_policy: str = "Fail",
    timeout_seconds: int = 10,
) -> dict[str, Any]:
    """The MutatingWebhookConfiguration as a dict.

    ``ca_bundle``: base64 of the PEM CA of the serving certificate (``ca_bundle_of``), or
    None when the injector puts it there itself (``servingcert``). Exactly one of ``url``
    (the annotation webhook's; the namespace webhook's ends in ``NAMESPACE_PATH``) or
    ``service`` (``{"namespace", "name", "port" (443)}``). ``excluded_namespaces`` are
    never sent to either webhook.
    """
    if (url is None) == (service is None):
        raise ValueError("give exactly one of url or service")

    def client(path: str) -> dict[str, Any]:
        config: dict[str, Any] = {} if ca_bundle is None else {"caBundle": ca_bundle}
        if service is None:
            assert url is not None
            config["url"] = url.rsplit(WEBHOOK_PATH, 1)[0] + path if path != WEBHOOK_PATH else url
        else:
            config["service"] = {
                "namespace": str(service["namespace"]),
                "name": str(service["name"]),
                "port": int(service.get("port", 443)),
                "path": path,
            }
        return config

    excluded = sorted({n for n in excluded_namespaces if n})
    names = [{"key": NAME_LABEL, "operator": "NotIn", "values": excluded}] if excluded else []
    opted_in = {"key": NAMESPACE_LABEL, "operator": "In", "values": [NAMESPACE_ENABLED]}
    not_opted_in = {"key": NAMESPACE_LABEL, "operator": "NotIn", "values": [NAMESPACE_ENABLED]}
    # fmt: off
    common = {
        "admissionReviewVersions": ["v1"],
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
                   "operations": ["CREATE"], "scope": "Namespaced"}],
        "failurePolicy": failure_policy, "sideEffects": "None", "timeoutSeconds": timeout_seconds,
        "reinvocationPolicy": "IfNeeded", "matchPolicy": "Equivalent",
    }
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "grelmicro-sidecar"}},
        "webhooks": [
            {"name": WEBHOOK_NAME, "clientConfig": client(WEBHOOK_PATH),
             "matchConditions": [{"name": "inject-annotation-true", "expression": MATCH_EXPRESSION}],
             "namespaceSelector": {"matchExpressions": [*names, not_opted_in]}, **common},
            {"name": NAMESPACE_WEBHOOK_NAME, "clientConfig": client(NAMESPACE_PATH),
             "matchConditions": [{"name": "not-inject-annotation-false",
                                  "expression": OPT_OUT_EXPRESSION}],
             "namespaceSelector": {"matchExpressions": [*names, opted_in]}, **common},
        ],
    }
    # fmt: on
