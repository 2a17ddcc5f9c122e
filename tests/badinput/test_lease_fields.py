"""Leases written by hand or by other tools: missing, null, out-of-range and foreign values.

Two layers. What the API server refuses never reaches a sidecar: those cases
show the refusal, and then prove our tolerant reader and the state machine on
the same values in-process (a future API server, or a Lease read from a backup,
might carry them). What the API server accepts is run against real sidecars:
they never crash, treat unusable values conservatively, wait a held Lease out,
and keep other people's labels and annotations.

Already covered in tests/sidecar/test_sidecar_cluster.py: a huge
``leaseDurationSeconds`` (2^31-1), the holder edited to a stranger, the Lease
deleted while leading.
"""

from __future__ import annotations

import datetime as dt
import json
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from sidecar.core import roster
from sidecar.core.election import Election, Wait, Write
from sidecar.core.lease import LeaseRecord
from sidecar.core.timing import Timing
from tests.chaos.checker import FileVersion, claims_of, overlaps
from tests.cluster import ControlPlane
from tests.sidecar.proc import SidecarProcess, leaders, wait_for

Spawn = Callable[..., SidecarProcess]
LEASE = 3.0  # tests.sidecar.proc.FAST


def create_raw(cluster: ControlPlane, namespace: str, body: dict[str, Any]) -> tuple[bool, str]:
    """Create a Lease from raw JSON (explicit nulls and wrong types included); (ok, kubectl's answer)."""
    obj = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "leader-main", "namespace": namespace},
        **body,
    }
    out = cluster.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(obj), check=False)
    return out.returncode == 0, out.stdout + out.stderr


def lease(api: Any, namespace: str) -> Any:
    return client.CoordinationV1Api(api).read_namespaced_lease("leader-main", namespace)


def problems_logged(proc: SidecarProcess) -> list[str]:
    return [str(r.get("problem")) for r in proc.logs() if "unusable field" in str(r.get("msg"))]


# ---- what the API server refuses ------------------------------------------------

REFUSED = {
    # case: (spec fields, the field our reader names, what the API server's refusal says)
    "negative-duration": (
        {"leaseDurationSeconds": -5},
        "leaseDurationSeconds",
        "leaseDurationSeconds",
    ),
    "zero-duration": ({"leaseDurationSeconds": 0}, "leaseDurationSeconds", "leaseDurationSeconds"),
    "string-duration": (
        {"leaseDurationSeconds": "15"},
        "leaseDurationSeconds",
        "leaseDurationSeconds",
    ),
    "over-int32-duration": (
        {"leaseDurationSeconds": 2**31},
        "leaseDurationSeconds",
        "leaseDurationSeconds",
    ),
    "negative-transitions": ({"leaseTransitions": -1}, "leaseTransitions", "leaseTransitions"),
    "unparsable-renewTime": ({"renewTime": "yesterday"}, "renewTime", 'parsing time "yesterday"'),
    "unparsable-acquireTime": (
        {"acquireTime": "2024-13-45T99:00:00.000000Z"},
        "acquireTime",
        "month out of range",
    ),
    "holder-not-a-string": ({"holderIdentity": 42}, "holderIdentity", "holderIdentity"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_api_server_refuses_and_our_reader_tolerates(
    case: str, cluster: ControlPlane, namespace: str
) -> None:
    spec, field, refusal = REFUSED[case]
    ok, answer = create_raw(cluster, namespace, {"spec": {"holderIdentity": "ghost", **spec}})
    assert not ok and refusal in answer, answer

    # The same value, read in-process: no exception, the field is named, and
    # the value is replaced by its conservative meaning.
    obj = {
        "metadata": {"name": "leader-main", "resourceVersion": "7"},
        "spec": {"holderIdentity": "ghost", "leaseDurationSeconds": 15, **spec},
    }
    record = LeaseRecord.from_object(obj)
    assert any(field in p for p in record.problems), record.problems
    assert record.lease_duration is None or 1 <= record.lease_duration <= 86400
    assert record.transitions >= 0

    # And the election waits a full lease duration on its own clock before taking it:
    # a foreign holder's (an unusable duration: our own stands in), and, with no usable
    # holder, as for any release this candidate did not see happen: ours, or the record's
    # if longer (contract §2, "Which release is free at once", since 1b189d7).
    now = [100.0]
    election = Election(
        "me", "leader-main", "ns", Timing(3, 2, 0.5), wall=lambda: dt.datetime.now(dt.UTC)
    )
    election.on_read(obj, now[0])
    ours = 3.0
    if record.holder is not None:
        wait = record.lease_duration or ours
    else:
        wait = max(ours, record.lease_duration or 0)
    action = election.next_action(now[0])
    assert isinstance(action, Wait) and action.until == now[0] + wait, action
    assert isinstance(election.next_action(now[0] + wait - 0.001), Wait)
    assert isinstance(election.next_action(now[0] + wait), Write)


# ---- what the API server accepts ------------------------------------------------


def test_lease_without_spec_is_free_and_keeps_foreign_metadata(
    spawn: Spawn, cluster: ControlPlane, api: Any, namespace: str
) -> None:
    ok, answer = create_raw(
        cluster,
        namespace,
        {
            "metadata": {
                "name": "leader-main",
                "namespace": namespace,
                "labels": {"team": "blue"},
                "annotations": {"note": "hand-made"},
            }
        },
    )
    assert ok, answer
    a = spawn("pod-a")
    started = time.monotonic()
    wait_for(a.leads, 10, what="leadership of a Lease without spec")
    # No holder, but a release pod-a never saw happen (it may be a restored backup's):
    # waited out for one lease duration, no more (contract §2).
    assert LEASE <= time.monotonic() - started < LEASE + 2.5
    got = lease(api, namespace)
    assert got.spec.holder_identity == "pod-a" and got.spec.lease_transitions == 1
    assert got.metadata.labels == {"team": "blue", "app.kubernetes.io/managed-by": "grelmicro"}
    assert got.metadata.annotations == {"note": "hand-made"}
    assert "Traceback" not in a.raw_log()


def test_explicit_nulls_are_dropped_by_the_api_server_and_the_lease_is_free(
    spawn: Spawn, cluster: ControlPlane, api: Any, namespace: str
) -> None:
    nulls = {
        k: None
        for k in (
            "holderIdentity",
            "leaseDurationSeconds",
            "acquireTime",
            "renewTime",
            "leaseTransitions",
        )
    }
    ok, answer = create_raw(cluster, namespace, {"spec": nulls})
    assert ok, answer
    assert json.loads(answer[: answer.rindex("}") + 1])["spec"] == {}
    a = spawn("pod-a")
    wait_for(a.leads, 10, what="leadership of an all-null Lease")
    assert lease(api, namespace).spec.holder_identity == "pod-a"


def test_held_lease_with_null_duration_is_waited_out_with_our_own_duration(
    spawn: Spawn, cluster: ControlPlane, namespace: str
) -> None:
    ok, answer = create_raw(
        cluster, namespace, {"spec": {"holderIdentity": "ghost", "leaseDurationSeconds": None}}
    )
    assert ok, answer
    a = spawn("pod-a")
    wait_for(lambda: a.http("/status")[0] == 200, 10)
    started = time.monotonic()
    wait_for(a.leads, 15, what="takeover of a held Lease without a duration")
    assert time.monotonic() - started >= LEASE - 0.6, (
        "a held Lease is waited out, our own duration standing in"
    )


@pytest.mark.parametrize(
    "renew_time", ["3000-01-01T00:00:00.000000Z", "2000-01-01T00:00:00.000000Z"]
)
def test_wall_clock_renew_time_is_not_trusted_for_takeover(
    renew_time: str, spawn: Spawn, cluster: ControlPlane, namespace: str
) -> None:
    ok, answer = create_raw(
        cluster,
        namespace,
        {"spec": {"holderIdentity": "ghost", "leaseDurationSeconds": 3, "renewTime": renew_time}},
    )
    assert ok, answer
    a = spawn("pod-a")
    wait_for(lambda: a.http("/status")[0] == 200, 10)
    started = time.monotonic()
    wait_for(a.leads, 15, what="takeover")
    took = time.monotonic() - started
    # Neither "renewed in the year 3000" (never expires) nor "in 2000" (expired long ago)
    # matters: the lease duration is counted on the local clock from first sight.
    assert LEASE - 0.6 <= took <= LEASE + 4, took


def test_non_ascii_holder_and_identity(
    spawn: Spawn, cluster: ControlPlane, api: Any, namespace: str
) -> None:
    foreign = "pöd-ø-日本-🚀"
    ok, answer = create_raw(
        cluster, namespace, {"spec": {"holderIdentity": foreign, "leaseDurationSeconds": 3}}
    )
    assert ok, answer
    me = "pöd-été-東京"
    a = spawn(me)
    seen = wait_for(
        lambda: (s := a.state()) and s.get("holder") == foreign and s,
        10,
        what="the foreign holder in state.json",
    )
    assert seen["is_leader"] is False
    raw = (a.state_dir / "state.json").read_bytes()
    raw.decode("utf-8")  # valid UTF-8 whatever the escaping
    wait_for(a.leads, 15, what="takeover from a non-ASCII holder")
    assert lease(api, namespace).spec.holder_identity == me
    status, body = a.http("/status")
    assert status == 200 and body["name"] == me and body["identity"] == me
    table = cluster.kubectl("get", "leases", "-n", namespace).stdout
    assert me in table
    holders = [r.get("holder") for r in a.logs() if r.get("msg") == "holder changed"]
    assert foreign in holders and me in holders
    assert "Traceback" not in a.raw_log()


def _joined(api: Any, namespace: str, follower: SidecarProcess) -> None:
    """Until ``follower`` lists itself in the Lease (the election's roster, contract §2): a
    hand edit read before that write would be refused (409), as kubectl's would."""

    def listed() -> bool:
        notes = lease(api, namespace).metadata.annotations or {}
        return follower.identity in [who for _, who, _ in roster.entries(notes, "leader-main")]

    wait_for(listed, 20, what=f"{follower.identity} in the election's roster")


def test_hand_edit_naming_a_live_follower_never_yields_two_claims(
    spawn: Spawn, api: Any, namespace: str
) -> None:
    """An admin moves the Lease from the leader to a follower by hand while the leader is stalled.

    The leader's process is paused (a GC pause, a frozen node, a partition: it
    cannot learn of the edit); its application, honouring valid_until, still
    leads until then. The follower must not claim before that.
    """
    procs = [spawn("pod-a"), spawn("pod-b")]
    wait_for(lambda: len(leaders(procs)) == 1, 15, what="a leader")
    old = next(p for p in procs if p.leads())
    new = next(p for p in procs if p is not old)
    versions: list[FileVersion] = []
    last: dict[str, bytes] = {}

    def sample(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for p in procs:
                try:
                    data = (p.state_dir / "state.json").read_bytes()
                except OSError:
                    continue
                if data != last.get(p.identity):
                    last[p.identity] = data
                    versions.append(
                        FileVersion.from_state(p.identity, time.time(), json.loads(data))
                    )
            time.sleep(0.003)

    _joined(api, namespace, new)
    sample(0.5)
    old.signal(signal.SIGSTOP)
    try:
        got = lease(api, namespace)
        got.spec.holder_identity = new.identity
        client.CoordinationV1Api(api).replace_namespaced_lease("leader-main", namespace, got)
        sample(2 * LEASE)
    finally:
        old.signal(signal.SIGCONT)
    sample(1.0)
    clashes = overlaps(claims_of(versions))
    assert not clashes, "\n".join(c.detail for c in clashes)
    wait_for(
        lambda: leaders(procs) == [new.identity], 3 * LEASE, what="the named holder to lead alone"
    )


def test_a_pod_that_never_led_does_not_release_a_lease_a_hand_edit_gave_it(
    spawn: Spawn, api: Any, namespace: str
) -> None:
    """A hand edit names a follower, which then gets SIGTERM before it could ever lead.

    Releasing would let a third pod take over at once while the old leader,
    paused, still publishes its claim; the follower never led, so it has
    nothing to release and leaves the record for the others to wait out.
    """
    old, follower = spawn("pod-a"), spawn("pod-b", start=False)
    wait_for(old.leads, 20, what="pod-a to lead")
    follower.start()
    wait_for(lambda: (follower.state() or {}).get("holder") == "pod-a", 20, what="pod-b following")
    _joined(api, namespace, follower)
    old.signal(signal.SIGSTOP)
    try:
        got = lease(api, namespace)
        got.spec.holder_identity = follower.identity
        client.CoordinationV1Api(api).replace_namespaced_lease("leader-main", namespace, got)
        wait_for(
            lambda: (follower.state() or {}).get("holder") == follower.identity,
            10,
            what="the edit seen",
        )
        assert not follower.leads()
        follower.signal(signal.SIGTERM)
        assert follower.wait(20) == 0
        after = lease(api, namespace)
        assert after.spec.holder_identity == follower.identity, (
            "released a Lease it never led under"
        )
        assert "released lease" not in follower.messages()
    finally:
        old.signal(signal.SIGCONT)
