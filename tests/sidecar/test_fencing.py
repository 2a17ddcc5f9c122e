"""After a deletion of the Lease: the fencing token never goes back, and nobody claims early (contract §2).

A store that remembers the largest token it accepted refuses a late write from
an old leader only if every newer leader carries a larger token. A token that
counts on ``leaseTransitions`` restarts at 0 when the Lease is recreated, after
``kubectl delete lease``, a sweep of an expired Lease, or grelmicro's release
(which deletes it), and the store then refuses every new leader.
"""

from __future__ import annotations

import datetime as dt
import signal
from collections.abc import Callable
from typing import Any

from kubernetes import client

from tests.sidecar.proc import SidecarProcess, wait_for

Spawn = Callable[..., SidecarProcess]


def _lead_and_leave(proc: SidecarProcess) -> int:
    wait_for(proc.leads, 20, what=f"{proc.identity} to lead")
    state = proc.state()
    assert state is not None and isinstance(state["fencing_token"], int), state
    proc.signal(signal.SIGTERM)
    assert proc.wait(20) == 0
    return int(state["fencing_token"])


def test_token_grows_across_handovers_and_a_deleted_lease(
    spawn: Spawn, api: Any, namespace: str
) -> None:
    coord = client.CoordinationV1Api(api)
    first = _lead_and_leave(spawn("pod-0"))
    second = _lead_and_leave(spawn("pod-1"))
    assert second > first
    # leaseTransitions keeps its Kubernetes meaning: one change of holder so far.
    lease = coord.read_namespaced_lease("leader-main", namespace)
    assert lease.spec.lease_transitions == 1
    coord.delete_namespaced_lease("leader-main", namespace)  # kubectl delete lease
    third = _lead_and_leave(spawn("pod-2"))
    assert third > second, f"token went back from {second} to {third} after the Lease was deleted"
    assert coord.read_namespaced_lease("leader-main", namespace).spec.lease_transitions == 0


def _stamp(value: str) -> float:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def test_a_candidate_that_never_saw_the_lease_waits_out_a_paused_leader_after_a_deletion(
    spawn: Spawn, api: Any, namespace: str
) -> None:
    """Deleted under a paused leader, the Lease is free to a newcomer only after that leader's claim."""
    coord = client.CoordinationV1Api(api)
    old = spawn("pod-0")
    wait_for(old.leads, 20, what="pod-0 to lead")
    old.signal(signal.SIGSTOP)
    try:
        frozen = old.state()
        assert frozen is not None and frozen["is_leader"] and frozen["valid_until"]
        vouched_until = _stamp(frozen["valid_until"])
        coord.delete_namespaced_lease("leader-main", namespace)
        new = spawn("pod-1")
        wait_for(new.leads, 20, what="pod-1 to lead")
        state = new.state()
        assert state is not None
        acquired = _stamp(state["acquired_at"])
        assert acquired >= vouched_until, (
            f"pod-1 acquired {vouched_until - acquired:.2f}s before the paused leader's claim ended"
        )
    finally:
        old.signal(signal.SIGCONT)
