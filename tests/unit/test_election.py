"""The election state machine with a fake clock and a fake optimistic store, in milliseconds."""

from __future__ import annotations

import copy
import datetime as dt
import math
import random
from typing import Any

import pytest

from sidecar.core import roster
from sidecar.core.election import Election, Read, Wait, Write
from sidecar.core.lease import LeaseRecord, vacate
from sidecar.core.timing import Timing

T = Timing(lease_duration=15, renew_deadline=10, retry_period=2)
EPOCH = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
RELEASED: dict[str, Any] = {
    "apiVersion": "coordination.k8s.io/v1",
    "kind": "Lease",
    "metadata": {
        "name": "leader-main",
        "namespace": "ns",
        "resourceVersion": "100",
        "labels": {"app.kubernetes.io/managed-by": "grelmicro"},
    },
    "spec": {"holderIdentity": "", "leaseDurationSeconds": 1, "leaseTransitions": 0},
}


class Store:
    """An optimistic single-object store with etcd-like resourceVersions."""

    def __init__(self, empty: bool = False, released: bool = False) -> None:
        """A new election (no Lease, none ever: the roster holds no mark of one); with
        ``empty``, no Lease but one may have existed; with ``released``, a released Lease.

        Most tests start from a new election, whose first candidate creates the
        Lease at once. With a Lease that may have existed, or one found released
        without having seen it released, a candidate first waits a lease duration
        (someone may have led under a Lease it never saw, contract §2).
        """
        self.obj: dict[str, Any] | None = copy.deepcopy(RELEASED) if released else None
        self.marked = empty or released
        self.rv = 100

    def read(self) -> dict[str, Any] | None:
        return copy.deepcopy(self.obj)

    def first_term(self) -> bool:
        """The roster's answer to a candidate that found no Lease (and marks the election)."""
        first = self.obj is None and not self.marked
        self.marked = True
        return first

    def write(self, action: Write) -> dict[str, Any] | str:
        body = copy.deepcopy(action.body)
        meta = body["metadata"]
        if action.create:
            if self.obj is not None:
                return "conflict"
        elif self.obj is None:
            return "notfound"
        elif meta.get("resourceVersion") != self.obj["metadata"]["resourceVersion"]:
            return "conflict"
        self.rv += 1
        meta["resourceVersion"] = str(self.rv)
        self.obj = body
        return copy.deepcopy(body)


def make(identity: str, clock: list[float] | None = None) -> Election:
    now = clock if clock is not None else [0.0]
    return Election(
        identity=identity,
        lease="leader-main",
        namespace="ns",
        timing=T,
        wall=lambda: EPOCH + dt.timedelta(seconds=now[0]),
        rng=random.Random(1),
    )


def step(e: Election, store: Store, now: float) -> Any:
    """Perform one action instantly; return it."""
    action = e.next_action(now)
    if isinstance(action, Read):
        obj = store.read()
        fresh = obj is None and not e.seen.known and store.first_term()
        e.on_read(obj, now, first_term=fresh)
    elif isinstance(action, Write):
        result = store.write(action)
        if result == "conflict":
            e.on_conflict(now)
        elif result == "notfound":
            e.on_not_found(now)
        else:
            assert isinstance(result, dict)
            e.on_written(result, now, now)
    return action


def test_timing_rules() -> None:
    assert T.problems() == []
    assert "renew-deadline" in Timing(15, 15, 2).problems()[0]
    assert "1.2" in Timing(15, 2, 2).problems()[0]
    assert "retry-period" in Timing(15, 10, 0).problems()[0]
    assert "at least 100ms" in Timing(15, 10, 0.001).problems()[0]
    assert Timing(3, 2, 0.1).problems() == []
    assert T.renew_interval == 5


def test_first_candidate_waits_a_lease_duration_then_creates_and_leads() -> None:
    store, e = Store(empty=True), make("a")
    assert isinstance(step(e, store, 0), Read)
    # No Lease, and none seen before: someone may have led under one that was
    # deleted and may still be publishing; its claim ends within a lease duration.
    assert e.next_action(0) == Wait(15)
    assert e.next_action(14.9) == Wait(15)
    action = step(e, store, 15)
    assert isinstance(action, Write) and action.create
    assert store.obj is not None and store.obj["spec"]["holderIdentity"] == "a"
    # The token is the resourceVersion the create returned (the store's first is 101).
    assert e.is_leader(15.0) and e.fencing_token == 101
    assert store.obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "grelmicro"
    assert [ev.kind for ev in e.drain_events()] == ["holder", "leading"]


def test_leader_renews_every_half_deadline_and_steps_down_at_deadline() -> None:
    store, e = Store(), make("a")
    step(e, store, 0), step(e, store, 0)
    assert e.next_action(1) == Wait(5)
    assert isinstance(step(e, store, 5), Write)
    assert e.valid_until(5) == 15
    # The API goes away: every retry fails.
    t = 10.0
    while t < 15:
        action = e.next_action(t)
        if isinstance(action, Write):
            e.on_error(t)
        t += 0.25
    assert e.is_leader(14.99)
    assert not e.is_leader(15.0)
    e.next_action(15.0)
    assert any(ev.kind == "stepped_down" for ev in e.drain_events())


def test_follower_waits_for_expiry_on_its_own_clock() -> None:
    store, a = Store(), make("a")
    step(a, store, 0), step(a, store, 0)
    b = make("b")
    step(b, store, 3)  # b reads at t=3 and sees a's record
    assert b.next_action(3) == Wait(18)
    assert b.next_action(17.9) == Wait(18)
    action = step(b, store, 18)  # a never renewed: b takes over
    assert isinstance(action, Write) and action.purpose == "acquire"
    assert b.is_leader(18) and b.fencing_token == int(store.read()["metadata"]["resourceVersion"])
    assert a.fencing_token is not None and b.fencing_token > a.fencing_token
    # a sees the change and steps down (it had already lapsed at t=10).
    a.observe(store.read(), 18.1)
    assert not a.is_leader(18.1)


def test_renewals_seen_by_the_follower_push_expiry() -> None:
    store, a, b = Store(), make("a"), make("b")
    step(a, store, 0), step(a, store, 0)
    step(b, store, 0.1)
    for t in (5.0, 10.0, 15.0):
        step(a, store, t)
        b.observe(store.read(), t + 0.01)
    assert b.next_action(16) == Wait(pytest.approx(30.01))


def test_released_lease_is_taken_at_once_with_a_new_fencing_token() -> None:
    store, a, b = Store(), make("a"), make("b")
    step(a, store, 0), step(a, store, 0)
    step(b, store, 1)
    assert isinstance(b.next_action(1), Wait)
    a_token = a.fencing_token
    a.resign()
    assert not a.is_leader(2)
    released = vacate(LeaseRecord.from_object(store.read() or {}), now=EPOCH)
    store.write(Write(released, create=False, purpose="renew"))
    b.observe(store.read(), 2)
    action = step(b, store, 2)
    assert isinstance(action, Write) and b.is_leader(2)
    assert b.fencing_token is not None and a_token is not None and b.fencing_token > a_token
    # Two terms on this Lease: a's (it created it), then b's.
    assert store.obj is not None and store.obj["spec"]["leaseTransitions"] == 1


def hand_off(leader: Election, store: Store, successor: str | None) -> None:
    """``leader`` stops and releases its claim, naming ``successor``."""
    leader.resign()
    record = LeaseRecord.from_object(store.read() or {})
    assert leader.may_release(record)
    store.write(Write(vacate(record, now=EPOCH, successor=successor), False, "renew"))


def test_a_hand_off_lets_the_named_successor_claim_at_once_and_the_others_wait_a_second() -> None:
    store, a, b, c = Store(), make("a"), make("b"), make("c")
    step(a, store, 0), step(a, store, 0)
    step(b, store, 1), step(c, store, 1)
    hand_off(a, store, "c")
    b.observe(store.read(), 2), c.observe(store.read(), 2)
    assert b.next_action(2) == Wait(3.0)  # the hand-off's 1 s duration, on b's own clock
    action = step(c, store, 2)
    assert isinstance(action, Write) and action.purpose == "acquire" and c.is_leader(2)
    assert "leader-election.grelmicro.io/handoff-from" not in (store.obj or {})["metadata"].get(
        "annotations", {}
    )  # the marker is gone with the claim
    b.observe(store.read(), 2.01)
    assert b.next_action(3) == Wait(pytest.approx(17.01))  # c's claim restarted b's wait


def test_a_named_successor_that_never_claims_costs_the_others_one_second() -> None:
    store, a, b = Store(), make("a"), make("b")
    step(a, store, 0), step(a, store, 0)
    step(b, store, 1)
    hand_off(a, store, "dead-pod")
    b.observe(store.read(), 2)
    assert isinstance(b.next_action(2.9), Wait)
    action = step(b, store, 3)
    assert isinstance(action, Write) and b.is_leader(3)


def test_the_leading_event_names_the_hand_off_even_if_the_watch_saw_the_claim_first() -> None:
    # The watch can deliver our own claim before the write's answer: the event must still
    # name the record the claim replaced (the hand-off to a name that never claimed), so the
    # roster drops that name (CI: test_handoff's frozen successor stayed listed, 1 run in 5).
    store, a, b = Store(), make("a"), make("b")
    step(a, store, 0), step(a, store, 0)
    step(b, store, 1)
    hand_off(a, store, "frozen-pod")
    b.observe(store.read(), 2)
    b.drain_events()
    action = b.next_action(3)
    assert isinstance(action, Write)
    written = store.write(action)
    assert isinstance(written, dict)
    b.observe(store.read(), 3.01)  # the watch event of our own claim, first
    b.on_written(written, 3, 3.02)
    (leading,) = [e for e in b.drain_events() if e.kind == "leading"]
    assert leading.replaced is not None and leading.replaced.holder == "frozen-pod"
    assert leading.replaced.handoff_from == "a"


def test_only_a_hand_off_written_by_someone_else_names_us() -> None:
    # A record naming us that this process did not send is waited out (a crashed run
    # with our name), and so is a "hand-off" from ourselves.
    for marker in (None, "b"):
        store, b = Store(released=True), make("b")
        obj = store.read()
        assert obj is not None
        obj["spec"].update(holderIdentity="b", leaseDurationSeconds=15)
        if marker:
            obj["metadata"]["annotations"] = {"leader-election.grelmicro.io/handoff-from": marker}
        b.observe(obj, 0)
        assert b.next_action(0) == Wait(15.0), marker


def test_conflict_triggers_a_reread_and_no_leadership() -> None:
    store, a, b = Store(empty=True), make("a"), make("b")
    step(a, store, 0)
    step(b, store, 0)  # both read "absent" (a Lease may have existed: both wait)
    step(a, store, 15)  # a creates
    action = step(b, store, 15)  # b's create conflicts
    assert isinstance(action, Write) and not b.is_leader(15)
    assert isinstance(b.next_action(15), Read)
    step(b, store, 15)
    assert b.holder == "a" and isinstance(b.next_action(15), Wait)


def test_hand_edited_holder_makes_the_leader_step_down() -> None:
    store, a = Store(), make("a")
    step(a, store, 0), step(a, store, 0)
    obj = store.read()
    assert obj is not None
    obj["spec"]["holderIdentity"] = "intruder"
    store.write(Write(obj, create=False, purpose="renew"))
    a.observe(store.read(), 1)
    assert not a.is_leader(1)
    assert any(ev.kind == "stepped_down" and "intruder" in ev.detail for ev in a.drain_events())
    # The intruder never renews: a takes the lease back after a full lease duration.
    assert a.next_action(2) == Wait(16)


def test_deleted_lease_seen_by_the_watch_leader_steps_down_follower_keeps_waiting() -> None:
    store, a, b = Store(), make("a"), make("b")
    step(a, store, 0), step(a, store, 0)
    step(b, store, 1)
    final = store.read()
    assert final is not None
    store.obj = None
    a.observe_deleted(final, 2)
    b.observe_deleted(final, 2)
    assert not a.is_leader(2)
    # Its last state named a: a may recreate at once; b must wait out a's lease.
    assert isinstance(a.next_action(2), Write)
    assert b.next_action(2) == Wait(16)


def test_deleted_lease_found_by_a_read_is_waited_out_from_then() -> None:
    store, a, b = Store(), make("a"), make("b")
    step(a, store, 0), step(a, store, 0)
    step(b, store, 1)
    store.obj = None
    a.observe(None, 2)
    b.observe(None, 2)
    # A read does not say who held it last (it may have changed hands unseen):
    # both wait a lease duration from the read, a (which stepped down) too.
    assert not a.is_leader(2)
    assert a.next_action(2) == Wait(17) and b.next_action(2) == Wait(17)
    b.observe(None, 10)  # reading it absent again does not push the wait
    assert b.next_action(10) == Wait(17)


def test_a_late_deleted_event_does_not_undo_a_newer_lease() -> None:
    store, a, b = Store(), make("a"), make("b")
    step(a, store, 0), step(a, store, 0)
    old = store.read()
    assert old is not None
    step(a, store, 5)  # a renews: newer than the object the late event carries
    step(b, store, 6)
    b.observe_deleted(old, 6.1)
    assert b.holder == "a" and b.next_action(6.1) == Wait(21)


def test_late_watch_event_is_ignored() -> None:
    store, a = Store(), make("a")
    step(a, store, 0), step(a, store, 0)
    old = store.read()
    step(a, store, 5)
    a.observe(old, 5.1)  # an event from before the renew, delivered late
    assert a.is_leader(5.1) and a.valid_until(5.1) == 15


def test_garbage_fields_are_reported_and_handled_conservatively() -> None:
    e = make("a")
    e.on_read(
        {
            "metadata": {"name": "leader-main", "resourceVersion": "7"},
            "spec": {
                "holderIdentity": "ghost",
                "leaseDurationSeconds": 10**9,
                "renewTime": "yesterday",
                "leaseTransitions": -3,
            },
        },
        0,
    )
    problems = [ev.detail for ev in e.drain_events() if ev.kind == "problem"]
    assert len(problems) == 3
    # Unusable duration: judged with our own lease duration, on our own clock.
    assert e.next_action(1) == Wait(15)
    action = e.next_action(15)
    assert isinstance(action, Write)
    assert action.body["spec"]["leaseTransitions"] == 1


def test_follower_backs_off_with_jitter_on_errors() -> None:
    e = make("b")
    delays = []
    for _ in range(5):
        action = e.next_action(0)
        assert isinstance(action, Read | Wait)
        e.on_error(0)
        delays.append(e.not_before)
    assert all(0 < d <= 4 * T.retry_period for d in delays)
    assert delays[-1] > delays[0]


# ---- a randomized multi-candidate simulation ----------------------------------


def simulate(
    seed: int, candidates: int = 3, horizon: float = 400.0, handoffs: bool = False
) -> tuple[int, int]:
    """Candidates with network latency, lost requests, pauses and crashes share one store.

    Returns (leadership changes, samples). Asserts that no two candidates ever
    publish leadership at the same instant.
    """
    rng = random.Random(seed)
    store = Store()
    clock = [0.0]
    elections = [make(f"c{i}", clock) for i in range(candidates)]
    ready_at = [0.0] * candidates  # when each candidate next acts
    down_until = [0.0] * candidates  # partitioned from the API until then
    changes, samples, last = 0, 0, None
    t = 0.0
    while t < horizon:
        t = min(ready_at)
        i = ready_at.index(t)
        clock[0] = t
        e = elections[i]
        if rng.random() < 0.01:  # crash and restart: a fresh state machine
            elections[i] = e = make(f"c{i}", clock)
        if handoffs and e.is_leader(t) and rng.random() < 0.02:
            # A graceful stop naming a successor (maybe a crashed or partitioned one),
            # then a restart under the same name.
            named = rng.choice([f"c{k}" for k in range(candidates) if k != i] + ["gone"])
            record = LeaseRecord.from_object(store.read() or {})
            e.resign()
            if e.may_release(record) and t >= down_until[i]:
                store.write(Write(vacate(record, now=EPOCH, successor=named), False, "renew"))
            elections[i] = e = make(f"c{i}", clock)
        if rng.random() < 0.01:
            down_until[i] = t + rng.uniform(1, 20)
        action = e.next_action(t)
        latency = rng.uniform(0.001, 0.5)
        if isinstance(action, Wait):
            ready_at[i] = min(action.until, t + rng.uniform(0.1, 3.0))  # watch wake-ups
            if t >= down_until[i] and rng.random() < 0.5:
                e.observe(store.read(), t)
        elif t < down_until[i] or rng.random() < 0.05:
            ready_at[i] = t + latency
            e.on_error(t + latency)
        elif isinstance(action, Read):
            e.on_read(store.read(), t + latency)
            ready_at[i] = t + latency
        else:
            result = store.write(action)  # applied at t, answered at t + latency
            if result == "conflict":
                e.on_conflict(t + latency)
            elif result == "notfound":
                e.on_not_found(t + latency)
            else:
                assert isinstance(result, dict)
                e.on_written(result, t, t + latency)
            ready_at[i] = t + latency
        # Sample the invariant at this instant and just after it.
        for probe in (t, t + 0.0005):
            leaders = [x.identity for x in elections if x.is_leader(probe)]
            samples += 1
            assert len(leaders) <= 1, f"seed {seed}: {leaders} both lead at t={probe:.4f}"
            if leaders and leaders[0] != last:
                changes += 1
                last = leaders[0]
        ready_at[i] = max(ready_at[i], t + 1e-6)
    return changes, samples


@pytest.mark.parametrize("handoffs", [False, True])
@pytest.mark.parametrize("seed", range(20))
def test_simulation_never_two_leaders(seed: int, handoffs: bool) -> None:
    changes, samples = simulate(seed, candidates=5 if handoffs else 3, handoffs=handoffs)
    assert samples > 1000
    assert changes >= 1  # somebody led at some point; the run exercised the protocol


def test_simulation_exercises_handovers() -> None:
    total = sum(simulate(seed)[0] for seed in range(100, 110))
    assert total >= 20, total


def test_after_resign_it_only_reads_what_it_has_not_seen_then_waits_forever() -> None:
    """A resigned candidate (stopping, handed over, standing aside) claims nothing, even a
    free Lease; one that has not seen the Lease reads it once (a read claims nothing, and
    the watch resumes from it: a pod standing aside for a shard still sees who owns it)."""
    for store in (Store(), Store(released=True)):
        e = make("a")
        e.resign()
        assert isinstance(step(e, store, 0), Read)
        assert e.next_action(0) == Wait(math.inf)
        assert e.next_action(3600) == Wait(math.inf)
        e.mark_stale()  # the watch lost its place: read again, still no claim
        assert isinstance(step(e, store, 3600), Read)
        assert e.next_action(3600) == Wait(math.inf)
    e = make("a")
    e.resign()
    step(e, Store(), 0)  # absent, read without asking for the first term (HandoffLock)
    e.rejoin()  # so it is read again, claiming: a first term is asked for then
    assert isinstance(e.next_action(1), Read)


def test_vouched_until_is_anchored_at_the_claim_and_lapses_with_the_deadline() -> None:
    clock = [0.0]
    store = Store()
    e = make("a", clock)
    while not e.leading:
        step(e, store, clock[0])
    assert e.vouched_until(clock[0]) == EPOCH + dt.timedelta(seconds=10)
    clock[0] = 5.0  # the renew is due: claimed at wall 5 s, sent at monotonic 5 s
    step(e, store, clock[0])
    assert e.vouched_until(5.1) == EPOCH + dt.timedelta(seconds=15)
    # Stable between renews, and gone once the renew deadline passed without one.
    assert e.vouched_until(9.0) == e.vouched_until(5.1)
    assert e.vouched_until(15.0) is None


def test_a_renew_that_started_before_a_later_one_does_not_move_the_anchor_back() -> None:
    clock = [0.0]
    store = Store()
    e = make("a", clock)
    while not e.leading:
        step(e, store, clock[0])
    clock[0] = 6.0
    action = e.next_action(6.0)
    assert isinstance(action, Write)
    result = store.write(action)
    assert isinstance(result, dict)
    e.on_written(result, 6.0, 6.2)
    anchored = e.vouched_until(6.2)
    e.on_written(result, 5.5, 6.3)  # an answer to a write sent earlier arrives late
    assert e.vouched_until(6.3) == anchored == EPOCH + dt.timedelta(seconds=16)


def test_mark_stale_makes_the_next_action_a_read() -> None:
    store = Store()
    e = make("a")
    while not e.leading:
        step(e, store, 0.0)
    e.mark_stale()
    assert isinstance(e.next_action(0.1), Read)


def test_token_grows_when_the_lease_is_deleted_and_created_again() -> None:
    store, a, b = Store(), make("a"), make("b")
    step(a, store, 0), step(a, store, 0)
    first = a.fencing_token
    a.resign()
    store.obj = None  # kubectl delete lease; the store's counter goes on, as etcd's does
    store.rv += 1
    step(b, store, 1)
    assert b.next_action(1) == Wait(16)
    step(b, store, 16)
    assert b.is_leader(16) and store.obj is not None
    assert store.obj["spec"]["leaseTransitions"] == 0
    assert first is not None and b.fencing_token is not None and b.fencing_token > first


def test_a_resource_version_that_is_not_a_number_gives_no_token_but_leadership_holds() -> None:
    class OpaqueStore(Store):
        def write(self, action: Write) -> dict[str, Any] | str:
            written = super().write(action)
            if isinstance(written, dict) and self.obj is not None:
                self.obj["metadata"]["resourceVersion"] = written["metadata"]["resourceVersion"] = (
                    f"x{self.rv}"
                )
            return written

    store, e = OpaqueStore(), make("a")
    step(e, store, 0), step(e, store, 0)
    assert e.is_leader(0.0) and e.fencing_token is None
    assert any(ev.kind == "problem" and "fencing token" in ev.detail for ev in e.drain_events())


def test_only_a_claim_this_process_wrote_may_be_released() -> None:
    from sidecar.core.lease import LeaseRecord

    store, a, b = Store(), make("a"), make("b")
    step(a, store, 0), step(a, store, 0)
    ours = LeaseRecord.from_object(store.read() or {})
    assert a.may_release(ours)
    # A hand edit names b, which never wrote it: b may not release it.
    edited = store.read() or {}
    edited["spec"]["holderIdentity"] = "b"
    store.write(Write(edited, create=False, purpose="renew"))
    b.on_read(store.read(), 1)
    named_b = LeaseRecord.from_object(store.read() or {})
    assert not b.may_release(named_b) and not a.may_release(named_b)


def test_a_store_restored_from_a_backup_is_believed_waited_out_and_never_re_read_in_a_loop() -> (
    None
):
    """etcd restored from a snapshot: resourceVersions go back (issue 12 item 3)."""
    store, a, b = Store(), make("a"), make("b")
    step(a, store, 0), step(a, store, 0)  # a leads
    backup = copy.deepcopy(store.obj)  # the snapshot: a leading at version 101
    for t in (5, 10, 15):
        step(a, store, t)  # renewals: 102, 103, 104
    step(b, store, 15)  # b follows at 104
    b.drain_events()
    # The restore: the store is back at the snapshot's state and revision.
    store.obj, store.rv = backup, 101
    b.mark_stale()  # the watch broke with the API server's restart
    assert isinstance(step(b, store, 16), Read)
    # The quorum read is the truth now: believed, reported, and not read again at once.
    assert b.record is not None and b.record.resource_version == "101"
    assert [ev.kind for ev in b.drain_events()] == ["rolled_back"]
    assert b.next_action(16) == Wait(31)  # nobody is trusted free for a lease duration
    # a's renewal carries 104, which the store no longer has: 409, then a read.
    assert isinstance(step(a, store, 20), Write) and a.seen.stale
    assert isinstance(step(a, store, 20), Read)
    assert not a.is_leader(20), "a leader whose store went back steps down"
    assert a.next_action(20) == Wait(35)
    # b claims after its wait; a stays out until its own has passed.
    assert isinstance(step(b, store, 31), Write) and b.is_leader(31)
    step(a, store, 35)
    assert not a.is_leader(35) and b.is_leader(35)


def test_a_settled_claim_is_the_last_answered_one_and_none_while_a_claim_is_in_flight() -> None:
    """``settled_claim``: what a release may be written against without a re-read. While a
    renew is sent and unanswered the Lease may already hold it, so a release against the
    version before would be refused (409) and written twice: there is none then."""
    wall = [0.0]
    store, a, b = Store(), make("a", wall), make("b")
    step(a, store, 0), step(a, store, 0)  # a leads
    step(b, store, 1)
    assert b.settled_claim() is None  # a follower holds no claim
    settled = a.settled_claim()
    assert settled is not None and settled.resource_version == a.written_version
    wall[0] = 5.0
    renew = a.next_action(5)
    assert isinstance(renew, Write) and renew.purpose == "renew"
    applied = store.write(renew)
    assert isinstance(applied, dict)
    assert a.settled_claim() is None  # sent, applied, not answered
    a.observe(applied, 5)
    assert a.settled_claim() is None  # its event seen, its answer still not
    a.on_written(applied, 5, 5)
    answered = a.settled_claim()
    assert (
        answered is not None and answered.resource_version == applied["metadata"]["resourceVersion"]
    )
    # A candidate joins the election's roster (an annotation patch): the claim is as it was.
    joined = {**applied, "metadata": {**applied["metadata"], "resourceVersion": "9000"}}
    a.observe(joined, 5.5)
    settled = a.settled_claim()
    assert settled is not None and settled.resource_version == "9000"
    wall[0] = 10.0
    assert isinstance(a.next_action(10), Write)  # a renew over it, sent, not answered
    assert a.settled_claim() is None
    a.observe(
        {**applied, "metadata": {**applied["metadata"], "resourceVersion": "50"}}, 6, quorum=True
    )
    assert a.settled_claim() is None  # after a rollback nothing is ours


def test_a_release_may_follow_our_own_write_whose_answer_was_lost_and_nothing_else() -> None:
    """``may_release``: our last answered write, or our last sent one (its renewTime, to the
    microsecond) when the answer never came; never a record naming us that we did not write,
    and nothing after the store went back in time."""
    store, a = Store(), make("a")
    step(a, store, 0), step(a, store, 0)  # a leads
    renew = a.next_action(5)
    assert isinstance(renew, Write) and renew.purpose == "renew"
    assert store.write(renew) != "conflict"  # applied; the answer is lost (a shutdown cancelled it)
    current = LeaseRecord.from_object(store.read() or {})
    assert current.resource_version != a.written_version
    assert a.may_release(current)
    # The same Lease hand-edited to name us (another renewTime): not ours.
    edited = store.read() or {}
    edited["spec"]["renewTime"] = "2026-01-01T00:00:07.000001Z"
    assert not a.may_release(LeaseRecord.from_object(edited))
    # After a rollback nothing is trusted as ours, not even the last write sent.
    a.observe(
        {
            **(store.read() or {}),
            "metadata": {**(store.read() or {})["metadata"], "resourceVersion": "50"},
        },
        6,
        quorum=True,
    )
    assert not a.may_release(LeaseRecord.from_object(store.read() or {}))


# ---- restores, first terms and hand-off markers (issue 27 item 4, 28 item 1, 27 item 6) ----


def test_a_new_election_leads_at_once_and_a_deleted_one_is_waited_out() -> None:
    """No mark of a Lease in the roster: the first candidate creates it at once (contract §2)."""
    store, a = Store(), make("a")
    step(a, store, 0)
    action = step(a, store, 0)
    assert isinstance(action, Write) and action.create and a.is_leader(0)
    # The election is marked now: a candidate that later finds its Lease gone waits.
    store.obj = None
    b = make("b")
    step(b, store, 1)
    assert b.next_action(1) == Wait(16)


def release_of(leader_obj: dict[str, Any], successor: str | None = None) -> dict[str, Any]:
    record = LeaseRecord.from_object(leader_obj)
    return vacate(record, now=EPOCH, successor=successor)


def test_a_release_not_seen_from_its_live_claim_is_waited_out_for_a_lease_duration() -> None:
    """A store restored from a backup (bumped or not), or a fresh start, shows an emptied or
    handed-off Lease this candidate never saw released: whoever led since may still publish."""
    store, a, b = Store(), make("a"), make("b")
    step(a, store, 0), step(a, store, 0)  # a leads: this is the backup's state
    backup = copy.deepcopy(store.obj)
    assert backup is not None
    released = release_of(backup)  # the backup holds a's release ...
    store.write(Write(released, create=False, purpose="renew"))
    step(b, store, 1)  # b sees it released from a's claim, which it never saw: a fresh start
    assert b.next_action(1) == Wait(16)
    c = make("c")  # ... and a follower that saw a later claim, by someone else, then the restore
    c.observe(
        {
            **backup,
            "spec": {
                **backup["spec"],
                "holderIdentity": "z",
                "acquireTime": "2026-01-01T00:00:05.000000Z",
                "leaseTransitions": 1,
            },
            "metadata": {**backup["metadata"], "resourceVersion": "150"},
        },
        2,
    )
    c.mark_stale()
    step(c, store, 3)  # the restored release, read after the gap
    assert c.next_action(3) == Wait(18)
    for handed in (release_of(backup, "b"), release_of(backup, "c")):
        fresh = make("b")
        fresh.observe(handed, 4)  # a hand-off to it, or to someone else, never seen written
        assert fresh.next_action(4) == Wait(19)


def test_a_release_of_the_claim_seen_live_is_free_at_once_to_anyone_or_to_the_one_named() -> None:
    store, a, b, c = Store(), make("a"), make("b"), make("c")
    step(a, store, 0), step(a, store, 0)
    live = store.read()
    assert live is not None
    b.observe(live, 1), c.observe(live, 1)
    handed = release_of(live, "b")
    b.observe(handed, 2), c.observe(handed, 2)
    assert isinstance(b.next_action(2), Write)  # named: at once
    assert c.next_action(2) == Wait(3)  # the hand-off's one second for the others
    c.observe(release_of(live), 2.5)  # emptied by its releaser after that second
    assert isinstance(c.next_action(2.5), Write)


def test_a_stale_hand_off_marker_on_another_tools_claim_never_names_us() -> None:
    """client-go's update replaces the spec and keeps the annotations: a marker from an old
    release survives under its claim; a hand edit naming us must still be waited out."""
    store, a, b = Store(), make("a"), make("b")
    step(a, store, 0), step(a, store, 0)
    handed = release_of(store.read() or {}, "b")  # a hands off to b, b never claims
    peer = copy.deepcopy(handed)
    peer["spec"].update(
        holderIdentity="client-go-peer",
        leaseTransitions=7,
        acquireTime="2026-01-01T00:01:00.000000Z",
        leaseDurationSeconds=15,
    )
    b.observe(peer, 60)  # the peer's claim, marker and all
    edited = copy.deepcopy(peer)
    edited["spec"]["holderIdentity"] = "b"  # then someone edits the holder to name b
    edited["metadata"]["resourceVersion"] = "999"
    b.observe(edited, 61)
    assert b.next_action(61) == Wait(76)


def test_a_stale_marker_on_a_longer_claim_is_waited_out_for_that_claims_duration() -> None:
    """Issue 38: client-go's update keeps the marker of an old hand-off under its own claim,
    whose leaseDurationSeconds (60 here) is its holder's promise, not ours (15): a candidate
    that saw the hand-off's claim live, and one that starts under the peer's claim, wait 60 s
    from each write of it they see; ours is the floor, never the ceiling."""
    store, a, b = Store(), make("a"), make("b")
    step(a, store, 0), step(a, store, 0)
    live = store.read() or {}
    b.observe(live, 1)
    peer = copy.deepcopy(release_of(live, "b"))  # a hands off to b, b never claims
    peer["spec"].update(
        holderIdentity="client-go-peer",
        leaseTransitions=7,
        acquireTime="2026-01-01T00:01:00.000000Z",
        leaseDurationSeconds=60,
    )
    peer["metadata"]["resourceVersion"] = "500"
    b.observe(peer, 60)  # the peer's claim, marker and all
    assert b.next_action(60) == Wait(120)
    renewed = copy.deepcopy(peer)
    renewed["spec"]["renewTime"] = "2026-01-01T00:01:30.000000Z"
    renewed["metadata"]["resourceVersion"] = "501"
    b.observe(renewed, 90)
    assert b.next_action(90) == Wait(150)
    fresh = make("c")
    fresh.observe(renewed, 91)  # started under the peer's claim
    assert fresh.next_action(91) == Wait(151)


def test_a_release_not_seen_from_its_live_claim_then_deleted_is_waited_out_all_the_same() -> None:
    """Issue 38: a DELETED event carries the record it removes, and is judged as that record
    was: a hand-off (or release) this candidate did not see released from its live claim is
    waited out for a lease duration from when it was seen, not for the hand-off's 1 s (or
    not at all). One seen released from the claim it saw live is free as before."""
    store, a = Store(), make("a")
    step(a, store, 0), step(a, store, 0)
    live = store.read() or {}
    for successor in ("c", "b", None):  # to another, to this candidate, to nobody
        handed = release_of(live, successor)
        b = make("b")
        b.observe(handed, 4)  # at start-up, or after a gap: never saw a's claim
        b.observe_deleted(handed, 4.5)
        assert b.next_action(4.5) == Wait(19), successor
        missed = make("b")  # saw a later claim by z; the watch missed what came after
        later = copy.deepcopy(live)
        later["spec"].update(holderIdentity="z", acquireTime="2026-01-01T00:00:02.000000Z")
        later["spec"]["leaseTransitions"] = 1
        later["metadata"]["resourceVersion"] = "150"
        missed.observe(later, 2)
        handed["metadata"]["resourceVersion"] = "160"
        missed.observe_deleted(handed, 3)
        assert missed.next_action(3) == Wait(18), successor
    seen = make("c")  # saw a's claim live, then its hand-off to b, then the deletion
    seen.observe(live, 1)
    handed = release_of(live, "b")
    seen.observe(handed, 2)
    seen.observe_deleted(handed, 2.5)
    assert seen.next_action(2.5) == Wait(3)  # the hand-off's one second, as before
    emptied = release_of(live)
    fresh = make("c")
    fresh.observe(live, 1), fresh.observe(emptied, 2), fresh.observe_deleted(emptied, 2.5)
    assert isinstance(fresh.next_action(2.5), Write)  # a release seen: at once, as before


def test_a_create_that_lands_after_another_term_began_and_was_deleted_waits_it_out() -> None:
    """Found by ``make test`` beside two chaos runs (test_lease_deleted_while_leading_no_double_
    leadership): b found a new election's Lease absent and sent its create; a's create won and
    a led; the Lease was deleted by hand; b's create landed after that and b led while a still
    did (2 ms, until a's watch showed the deletion). A term b saw begin while its create was in
    flight may still be vouched for: the created Lease is not b's term before that claim's
    lease has passed (b holds it meanwhile, so nobody else claims)."""
    store, a, b = Store(), make("a"), make("b")
    a.on_read(None, 0, first_term=True)
    b.on_read(None, 0, first_term=True)
    sent = b.next_action(0)
    assert isinstance(sent, Write) and sent.create  # b's create is in flight from here
    step(a, store, 0.0)
    assert a.is_leader(0.0)
    led = store.read()
    assert led is not None
    b.observe(led, 0.01)  # b's watch shows a's term
    store.obj = None  # deleted by hand
    b.observe_deleted(led, 0.02)
    landed = store.write(sent)  # b's create lands on the absent Lease
    assert isinstance(landed, dict)
    b.on_written(landed, 0.0, 0.03)
    assert not b.is_leader(0.03) and b.valid_until(0.03) is None, "b leads beside a"
    wait = b.next_action(0.03)
    assert isinstance(wait, Wait) and wait.until >= 0.01 + T.lease_duration, wait
    assert "leading" not in [ev.kind for ev in b.drain_events()]
    # Once a's claim has passed, b takes its own Lease over like any other and leads.
    action = step(b, store, wait.until)
    assert isinstance(action, Write) and b.is_leader(wait.until)


def test_a_candidate_joining_the_roster_under_a_dead_holder_does_not_delay_its_takeover() -> None:
    """A join or leave (a roster entry, an annotation of the Lease) is another candidate's
    write, not its holder's: it is no sign of the holder's life. A replacement pod started
    while the leader is dead must not push the takeover a lease duration further. A write
    that changes nothing the roster holds, though, is still one (a renewal with a frozen
    wall clock leaves renewTime as it was)."""
    store, a, b = Store(), make("a"), make("b")
    step(a, store, 0), step(a, store, 0)  # a leads; then it dies: no more renewals
    step(b, store, 1)
    free_at = b.seen.free_at()
    assert store.obj is not None
    joined = copy.deepcopy(store.obj)
    joined["metadata"]["annotations"] = roster.entry("leader-main", "c", EPOCH)
    joined["metadata"]["resourceVersion"] = "9001"
    b.observe(joined, 10)
    assert b.seen.free_at() == free_at  # c's join: a's claim still ends when it did
    left = copy.deepcopy(joined)
    left["metadata"]["annotations"] = {}
    left["metadata"]["resourceVersion"] = "9002"
    b.observe(left, 11)
    assert b.seen.free_at() == free_at  # and c leaving again
    same = copy.deepcopy(left)
    same["metadata"]["resourceVersion"] = "9003"
    b.observe(same, 12)
    assert b.seen.free_at() == 12 + T.lease_duration  # a write with nothing changed: a's


def _landed_unanswered(store: Store, e: Election, now: float) -> dict[str, Any]:
    """``e`` sends its claim at ``now``; the store applies it; the answer never comes (a
    request timeout at a loaded API server): ``e`` is told an error 4 s later."""
    sent = e.next_action(now)
    assert isinstance(sent, Write)
    landed = store.write(sent)
    assert isinstance(landed, dict)
    e.on_error(now + 4)
    return landed


def test_a_claim_whose_answer_was_lost_is_taken_up_not_waited_out() -> None:
    """Issue 38, 500 candidates started at once (bench.crowd): the first create's answer did not
    come within the request timeout though the server applied it; its sender saw itself named
    on the watch and waited its own claim out like anyone's, and the election had no leader
    for a lease duration more (43 s to a first leader, 15 of them this). A claim this process
    sent (its renewTime to the microsecond) and nobody wrote over is one nobody else may take
    before its lease has passed: its sender writes over it at once, and leads from that write."""
    store, b, c = Store(), make("b"), make("c")
    b.on_read(None, 0, first_term=True)
    landed = _landed_unanswered(store, b, 0)
    assert not b.is_leader(4)
    c.observe(landed, 0.5)  # the others wait it out, from when they saw it
    b.observe(landed, 0.5)
    t = b.not_before  # the error's backoff
    assert 4 < t < 0.5 + T.lease_duration
    taken = step(b, store, t)
    assert isinstance(taken, Write) and not taken.create, taken
    assert b.is_leader(t) and b.fencing_token == 102 and b.valid_until(t) == t + T.renew_deadline
    assert [ev.kind for ev in b.drain_events()].count("leading") == 1
    assert t < 0.5 + T.lease_duration
    # c never sees it free meanwhile: b's write is one more sign of life.
    assert store.obj is not None
    c.observe(store.read() or {}, t + 0.01)
    assert isinstance(c.next_action(t + 0.01), Wait)


def test_a_claim_that_lands_while_standing_aside_is_taken_up_on_rejoining() -> None:
    """Shards in a rollout of real pods (stop 49): a pod claimed a shard handed to it, the
    board stood it aside while the claim was in flight (its share had changed), and the
    claim landed: told to nobody, as the candidate was resigned. Standing again a second
    later, it waited its own claim out like anyone's: the shard had no owner for a lease
    duration. A claim this process sent and that landed while it stood aside is taken up at
    once on rejoining (written over, leading from that write), as a lost answer's is."""
    store, b, c = Store(), make("b"), make("c")
    b.on_read(None, 0, first_term=True)
    sent = b.next_action(0)
    assert isinstance(sent, Write)
    b.resign("shard of another member")  # stood aside while the claim was in flight
    landed = store.write(sent)
    assert isinstance(landed, dict)
    b.on_written(landed, 0, 0.05)
    c.observe(landed, 0.05)
    assert not b.is_leader(0.05) and b.next_action(0.05) == Wait(math.inf)
    b.rejoin()
    taken = step(b, store, 1)
    assert isinstance(taken, Write) and not taken.create, taken
    assert b.is_leader(1) and b.valid_until(1) == 1 + T.renew_deadline
    assert isinstance(c.next_action(1), Wait)  # the others still wait b's claim out


def test_a_claim_naming_us_that_this_process_did_not_send_is_still_waited_out() -> None:
    """A sidecar restarted on its own (same pod, same identity) finds the Lease naming it: the
    previous process wrote that claim and its app may act on it until its valid_until. The new
    process did not send it, so it waits it out as before (contract §2)."""
    store, old = Store(), make("b")
    step(old, store, 0), step(old, store, 0)
    assert old.is_leader(0)
    new = make("b")
    step(new, store, 1)
    assert new.next_action(1) == Wait(1 + T.lease_duration)


def test_a_lost_answer_after_another_term_began_and_was_deleted_is_still_waited_out() -> None:
    """The case of ``test_a_create_that_lands_after_another_term_began_and_was_deleted_
    waits_it_out``, the create's answer lost: b saw a's term begin while its create was in
    flight, so b's own claim on the watch is no term of b's before a's lease has passed."""
    store, a, b = Store(), make("a"), make("b")
    a.on_read(None, 0, first_term=True)
    b.on_read(None, 0, first_term=True)
    sent = b.next_action(0)
    assert isinstance(sent, Write) and sent.create
    step(a, store, 0.0)
    led = store.read()
    assert led is not None and a.is_leader(0.0)
    b.observe(led, 0.01)
    store.obj = None
    b.observe_deleted(led, 0.02)
    landed = store.write(sent)
    assert isinstance(landed, dict)
    b.on_error(4.0)
    b.observe(landed, 0.05)
    t = 4.0
    while t < 0.01 + T.lease_duration:
        action = b.next_action(t)
        assert not isinstance(action, Write), f"b claims at {t} while a may still lead"
        if isinstance(action, Read):
            b.on_read(store.read(), t)
        t += 0.5
