"""A namespace label asks for the sidecar in every pod (issue 37, item 6), in real pods.

``kubectl label namespace … leader-election.grelmicro.io/inject=enabled``, as
Istio users write ``istio-injection=enabled``: a Deployment without any
annotation gets the sidecar and elects one leader; a pod annotated
``inject: "false"`` stays without it.
"""

from __future__ import annotations

import json
from typing import Any

from tests.e2e.conftest import Cluster, wait_for
from tests.e2e.test_election import deployment, leaders, pods


def _sidecar_names(pod: dict[str, Any]) -> list[str]:
    return [c["name"] for c in pod["spec"].get("initContainers") or []]


def test_a_labelled_namespace_injects_unannotated_pods_and_skips_opted_out_ones(
    e2e: Cluster, workload_namespace: str
) -> None:
    ns = workload_namespace
    e2e.kubectl("label", "namespace", ns, "leader-election.grelmicro.io/inject=enabled")
    plain = deployment("plain", replicas=2)
    del plain["spec"]["template"]["metadata"]["annotations"]["leader-election.grelmicro.io/inject"]
    e2e.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(plain))
    out = deployment("opted-out", replicas=1, annotations={})
    out["spec"]["template"]["metadata"]["annotations"]["leader-election.grelmicro.io/inject"] = (
        "false"
    )
    out["spec"]["template"]["spec"]["containers"][0]["command"] = ["sleep", "infinity"]
    e2e.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(out))

    wait_for(lambda: len(pods(e2e, ns, "plain")) == 2, 60, "the plain Deployment's pods")
    assert all(_sidecar_names(p) == ["grelmicro-sidecar"] for p in pods(e2e, ns, "plain"))
    leader = wait_for(lambda: leaders(e2e, ns, "plain"), 90, "a leader among unannotated pods")
    assert len(leader) == 1
    lease = e2e.json("get", "lease", "-n", ns, "leader-plain")
    assert lease["spec"]["holderIdentity"] == leader[0]

    opted_out = wait_for(lambda: pods(e2e, ns, "opted-out"), 60, "the opted-out pod")
    assert _sidecar_names(opted_out[0]) == []
