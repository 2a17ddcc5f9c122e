"""A namespace that assigns UIDs from a range and refuses 65532 (issue 37, item 6), in real pods.

OpenShift's restricted-v2 gives each namespace a UID range (the annotation
``openshift.io/sa.scc.uid-range``), assigns the pods' UIDs from it at
admission and refuses any other. The same rules are built here from
Kubernetes' own admission policies: a MutatingAdmissionPolicy that gives a
pod without a UID the range's first, and a ValidatingAdmissionPolicy that
refuses any container whose UID falls outside the range (65532, the image's
and the sidecar's former fixed UID, among them). The sidecar, which names no
UID of its own, runs under the assigned one, or under the one the pod's
securityContext sets, and elects a leader either way.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import ROOT, Cluster, process_identity, wait_for
from tests.e2e.test_election import deployment, leaders, pods

FIRST, SIZE = 1000700000, 10000
RANGE = "openshift.io/sa.scc.uid-range"


def _policies(ns: str) -> list[dict[str, Any]]:
    pods_created = {
        "resourceRules": [
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
             "resources": ["pods"]}
        ]
    }  # fmt: skip
    start = f"int(namespaceObject.metadata.annotations['{RANGE}'].split('/')[0])"
    size = f"int(namespaceObject.metadata.annotations['{RANGE}'].split('/')[1])"
    in_range = "(u >= variables.low && u <= variables.high)"
    container_ok = (
        "!has(c.securityContext) || !has(c.securityContext.runAsUser) || "
        + in_range.replace("u ", "c.securityContext.runAsUser ")
    )
    binding_scope = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": f"uid-range-{ns}"},
            "spec": {
                "matchConstraints": pods_created,
                "failurePolicy": "Fail",
                "reinvocationPolicy": "IfNeeded",
                "matchConditions": [
                    {
                        "name": "no-uid-yet",
                        "expression": "!has(object.spec.securityContext) || "
                        "!has(object.spec.securityContext.runAsUser)",
                    }
                ],
                "mutations": [
                    {
                        "patchType": "ApplyConfiguration",
                        "applyConfiguration": {
                            "expression": "Object{spec: Object.spec{securityContext: "
                            f"Object.spec.securityContext{{runAsUser: {start}, "
                            f"runAsGroup: {start}, fsGroup: {start}}}}}}}"
                        },
                    }
                ],
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": f"uid-range-{ns}"},
            "spec": {"policyName": f"uid-range-{ns}", "matchResources": binding_scope},
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": f"uid-range-{ns}"},
            "spec": {
                "matchConstraints": pods_created,
                "failurePolicy": "Fail",
                "variables": [
                    {"name": "low", "expression": start},
                    {"name": "high", "expression": f"{start} + {size} - 1"},
                ],
                "validations": [
                    {
                        "expression": "has(object.spec.securityContext) && "
                        "has(object.spec.securityContext.runAsUser) && "
                        + in_range.replace("u ", "object.spec.securityContext.runAsUser ")
                        + f" && object.spec.containers.all(c, {container_ok}) && "
                        f"(!has(object.spec.initContainers) || "
                        f"object.spec.initContainers.all(c, {container_ok}))",
                        "messageExpression": f"'every UID must be in this namespace\\'s range ' + "
                        f"namespaceObject.metadata.annotations['{RANGE}']",
                        "reason": "Forbidden",
                    }
                ],
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": f"uid-range-{ns}"},
            "spec": {
                "policyName": f"uid-range-{ns}",
                "validationActions": ["Deny"],
                "matchResources": binding_scope,
            },
        },
    ]


@pytest.fixture
def ranged_namespace(e2e: Cluster, release: str) -> Iterator[str]:
    ns = f"u-{uuid.uuid4().hex[:8]}"
    e2e.kubectl("create", "namespace", ns)
    e2e.kubectl("annotate", "namespace", ns, f"{RANGE}={FIRST}/{SIZE}")
    e2e.kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted")
    e2e.kubectl("apply", "-n", ns, "-f", str(ROOT / "manifests" / "rbac.yaml"))
    policies = _policies(ns)
    e2e.kubectl("apply", "-f", "-", input=json.dumps({"kind": "List", "apiVersion": "v1",
                                                      "items": policies}))  # fmt: skip
    try:
        yield ns
    finally:
        for obj in policies:
            e2e.kubectl("delete", obj["kind"], obj["metadata"]["name"], "--ignore-not-found")
        e2e.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def _dry_run(e2e: Cluster, ns: str, pod_context: dict[str, Any], container_uid: int) -> str:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe"},
        "spec": {
            "securityContext": {
                "runAsNonRoot": True,
                "seccompProfile": {"type": "RuntimeDefault"},
                **pod_context,
            },
            "containers": [
                {
                    "name": "app",
                    "image": "curlimages/curl:8.11.1",
                    "securityContext": {
                        "runAsUser": container_uid,
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }
    done = e2e.kubectl(
        "create", "-n", ns, "--dry-run=server", "-f", "-", input=json.dumps(pod), check=False
    )
    return done.stderr


def test_the_sidecar_runs_under_the_uid_a_namespace_assigns_or_the_pod_sets(
    e2e: Cluster, ranged_namespace: str
) -> None:
    ns = ranged_namespace
    # The namespace's admission refuses 65532, once its policies are in force.
    refusal = wait_for(
        lambda: (
            "every UID must be in this namespace's range" in _dry_run(e2e, ns, {}, 65532)
            and _dry_run(e2e, ns, {}, 65532)
        ),
        60,
        "the namespace's policies to refuse UID 65532",
    )
    assert f"{FIRST}/{SIZE}" in refusal

    assigned = deployment("assigned", replicas=2)
    context = assigned["spec"]["template"]["spec"]["securityContext"]
    del context["runAsUser"], context["runAsGroup"]  # the namespace's policy assigns them
    own = deployment("own", replicas=2)
    uid = FIRST + 42
    own["spec"]["template"]["spec"]["securityContext"].update(runAsUser=uid, runAsGroup=uid)
    for workload in (assigned, own):
        e2e.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(workload))

    for name, expected in (("assigned", FIRST), ("own", uid)):
        wait_for(lambda n=name: len(leaders(e2e, ns, n)) == 1, 120, f"{name}: one leader")
        for pod in pods(e2e, ns, name):
            sidecar = pod["spec"]["initContainers"][0]
            assert sidecar["name"] == "grelmicro-sidecar"
            assert "runAsUser" not in sidecar["securityContext"], sidecar["securityContext"]
            assert pod["spec"]["securityContext"]["runAsUser"] == expected
            who = process_identity(e2e, ns, pod["metadata"]["name"], "grelmicro-sidecar")
            assert who[:2] == [str(expected), str(expected)], (name, who)
