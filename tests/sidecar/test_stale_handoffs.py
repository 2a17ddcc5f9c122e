"""Hand-off markers a sidecar did not see written, against the real API server (issue 38).

A hand-off (contract §2) is free at once only to a candidate that saw the very
claim it releases live. Any other marker is waited out: for a lease duration,
or for the duration of the claim it sits under when that is longer (client-go
keeps the annotations of the object it updates, so a marker of an old
hand-off can survive under a client-go claim of 60 s); and a DELETED event
does not shorten that wait. Each case is one real sidecar (``FAST``: a 3 s
lease) and a Lease written by hand, as a peer or a restore would leave it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from sidecar.core.lease import HANDOFF_ANNOTATION
from tests.cluster import ControlPlane
from tests.sidecar.proc import SidecarProcess, wait_for

Spawn = Callable[..., SidecarProcess]
LEASE = 3.0  # tests.sidecar.proc.FAST


def _marked(cluster: ControlPlane, namespace: str, holder: str, seconds: int) -> None:
    """The election's Lease held by ``holder`` for ``seconds``, under a hand-off marker from
    a pod that is gone: what client-go's claim over an old hand-off looks like."""
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    obj = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": "leader-main",
            "namespace": namespace,
            "annotations": {HANDOFF_ANNOTATION: "gone-pod"},
        },
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": seconds,
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": 3,
        },
    }
    cluster.kubectl("create", "-f", "-", input=json.dumps(obj))


def _seen(proc: SidecarProcess, holder: str) -> float:
    """When ``proc`` has logged that it sees ``holder`` (it saw the Lease: its wait began).
    The log, not the state file: a follower's state passes over a record with a marker."""

    def logged() -> bool:
        return any(
            r.get("msg") == "holder changed" and r.get("holder") == holder for r in proc.logs()
        )

    wait_for(logged, 20, 0.005, what=f"{proc.identity} to see {holder}")
    return time.monotonic()


def test_a_stale_marker_under_a_longer_claim_is_waited_out_for_that_claims_duration(
    spawn: Spawn, cluster: ControlPlane, namespace: str
) -> None:
    """8 s of client-go's claim, not the sidecar's own 3 s lease."""
    _marked(cluster, namespace, "client-go-peer", 8)
    a = spawn("pod-a")
    seen = _seen(a, "client-go-peer")
    wait_for(a.leads, 20, what="pod-a to take over")
    took = time.monotonic() - seen
    assert took >= 8 - 0.6, f"took over {took:.2f}s after seeing an 8 s claim"


def test_a_hand_off_not_seen_released_then_deleted_is_waited_out_for_a_lease_duration(
    spawn: Spawn, cluster: ControlPlane, namespace: str
) -> None:
    """The hand-off's 1 s is no bound on whoever may still publish under a marker the sidecar
    did not see written: its deletion leaves the lease duration to wait, from first sight."""
    _marked(cluster, namespace, "named-pod", 1)
    a = spawn("pod-a")
    seen = _seen(a, "named-pod")
    cluster.kubectl("delete", "lease", "leader-main", "-n", namespace)
    wait_for(a.leads, 20, what="pod-a to create the Lease and lead")
    took = time.monotonic() - seen
    assert took >= LEASE - 0.6, f"led {took:.2f}s after seeing the hand-off, deleted since"
