"""The election state machine: pure, clock injected, no I/O of its own.

Safety model
------------
Guarantee: at no instant do two candidates *publish* leadership, provided the
candidates' monotonic clocks run at about the same rate (the margin is
``lease_duration - renew_deadline``, 5 s of 15 s by default) and the API server
offers optimistic writes on one object (it does: every write carries the
``resourceVersion`` it read, and a stale one gets 409).

Why it holds: a leader publishes "leader" only while ``now < S + renew_deadline``,
where ``S`` is the local monotonic instant at which its last *successful* write
*started*. Any other candidate can only have seen that write after ``S``, and
takes the lease over only once ``lease_duration`` has passed on its own
monotonic clock since it last saw the record change, so no earlier than
``S + lease_duration > S + renew_deadline``. Wall-clock ``renewTime`` is never
trusted for takeover: node clocks disagree.

A graceful release may name a successor (a hand-off): the Lease names it for
one second and says who released. The successor may claim at once, as anyone
may claim an emptied Lease: the releasing holder stopped publishing before it
wrote the release. Everyone else waits the second out, so a dead successor
delays the handover by one second, and never claims anything itself: it must
still write, and publishes only from the start of its own successful write.

Not guaranteed: that the application stops its work at that instant. The
sidecar publishes; the application must honour ``valid_until`` (or gate on the
probe). For resources that can check it, the fencing token (the resourceVersion
of the write that began the term) orders leaders, also across a deletion of
the Lease: a later term begins with a later write.

Shape
-----
The driver asks ``next_action(now)`` and gets a ``Read``, a ``Write`` (create,
acquire or renew) or a ``Wait(until)``; it performs it and reports back with
``on_read``/``on_written``/``on_conflict``/``on_error``; watch events go to
``observe``. ``is_leader(now)`` is the only truth the publishers use.
"""

from __future__ import annotations

import datetime as dt
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from .lease import LeaseRecord, claim, version_number
from .timing import Timing


@dataclass(frozen=True)
class Read:
    """Fetch the Lease (the record is unknown or stale)."""


@dataclass(frozen=True)
class Write:
    """Create or replace the Lease with ``body`` (it carries the resourceVersion read)."""

    body: dict[str, Any]
    create: bool
    purpose: Literal["acquire", "renew"]


@dataclass(frozen=True)
class Wait:
    """Nothing to do before ``until`` (monotonic), unless the watch brings news."""

    until: float


Action = Read | Write | Wait


@dataclass(frozen=True)
class Event:
    """Something the driver should log or count."""

    kind: Literal["leading", "stepped_down", "holder", "problem", "rolled_back"]
    detail: str
    fencing_token: int | None = None
    #: ``leading``: the record the acquiring write replaced (a hand-off to someone else, maybe).
    replaced: LeaseRecord | None = None


@dataclass
class Election:
    identity: str
    lease: str
    namespace: str
    timing: Timing
    wall: Callable[[], dt.datetime] = field(default=lambda: dt.datetime.now(dt.UTC))
    rng: random.Random = field(default_factory=random.Random)

    record: LeaseRecord | None = None
    known: bool = False
    stale: bool = False
    observed_at: float = -math.inf
    expires_at: float = -math.inf
    leading: bool = False
    renewed_at: float = -math.inf
    #: Wall time of the claim behind ``renewed_at``: where ``vouched_until`` is anchored.
    renewed_wall: dt.datetime | None = None
    fencing_token: int | None = None
    #: resourceVersion of our last successful claim: a Lease state we may release.
    written_version: str | None = None
    #: renewTime of the last claim we sent, answered or not: the other one (``may_release``).
    sent_renew_time: dt.datetime | None = None
    not_before: float = -math.inf
    #: After a rollback of the store, nobody's claim is judged free before this.
    quarantine_until: float = -math.inf
    failures: int = 0
    resigned: bool = False
    events: list[Event] = field(default_factory=list)
    _problems_seen: set[str] = field(default_factory=set)
    _claimed_wall: dt.datetime | None = None

    # ---- what the publishers read ---------------------------------------
    def is_leader(self, now: float) -> bool:
        return (
            self.leading
            and not self.resigned
            and now < self.renewed_at + self.timing.renew_deadline
        )

    def valid_until(self, now: float) -> float | None:
        """Monotonic instant until which leadership is vouched for (None when not leading)."""
        return self.renewed_at + self.timing.renew_deadline if self.is_leader(now) else None

    def vouched_until(self, now: float) -> dt.datetime | None:
        """Wall-clock form of ``valid_until`` for the application (contract §4).

        Anchored to the wall time of the claim behind the last successful
        renew, taken before the write was sent, so it is never later than the
        monotonic deadline and stays put between renews (no rewrite per step).
        """
        if not self.is_leader(now) or self.renewed_wall is None:
            return None
        return self.renewed_wall + dt.timedelta(seconds=self.timing.renew_deadline)

    @property
    def holder(self) -> str | None:
        return self.record.holder if self.record is not None else None

    # ---- decisions --------------------------------------------------------
    def next_action(self, now: float) -> Action:
        if self.resigned:
            return Wait(math.inf)
        if self.leading and now >= self.renewed_at + self.timing.renew_deadline:
            self._step_down("renew deadline passed without a successful renew")
        if not self.known or self.stale:
            return Read() if now >= self.not_before else Wait(self.not_before)
        if self.leading:
            due = max(self.renewed_at + self.timing.renew_interval, self.not_before)
            if now >= due:
                return self._claim("renew")
            return Wait(min(due, self.renewed_at + self.timing.renew_deadline))
        free = self._free_at()
        if now >= max(free, self.not_before):
            return self._claim("acquire")
        if free > now and free >= self.not_before:
            self.failures = 0  # waiting on a live holder, not on a backoff: the streak is over
        return Wait(max(free, self.not_before))

    def _free_at(self) -> float:
        return max(self._free_by_record(), self.quarantine_until)

    def _free_by_record(self) -> float:
        record = self.record
        if record is None:
            return self.expires_at  # deleted: the last holder's expiry still stands
        if record.holder is None:
            return -math.inf
        if record.holder == self.identity and record.handoff_from not in (None, self.identity):
            # A hand-off to us: the releasing holder stepped down before writing
            # it, exactly as for an empty holder, and named us to go first.
            # Everyone else waits out its 1 s duration (contract §2).
            return -math.inf
        # A record naming someone else, or naming us without our having written
        # it (a hand edit, a crashed earlier run with our identity, a write whose
        # answer we lost), is waited out like any other: whoever led before may
        # still be publishing until its own deadline.
        return self.expires_at

    def _claim(self, purpose: Literal["acquire", "renew"]) -> Write:
        self._claimed_wall = self.sent_renew_time = self.wall()
        body = claim(
            self.record,
            name=self.lease,
            namespace=self.namespace,
            identity=self.identity,
            lease_duration=int(self.timing.lease_duration),
            now=self._claimed_wall,
            acquire=purpose == "acquire",
        )
        return Write(body=body, create=self.record is None, purpose=purpose)

    # ---- observations -----------------------------------------------------
    def observe(self, obj: dict[str, Any] | None, now: float, quorum: bool = False) -> None:
        """A fresh view of the Lease (read or watch); None when it does not exist.

        ``quorum``: the view is a quorum read, the API server's current truth.
        A watch event older than what we know is late and dropped; a quorum
        read older than what we know means the store went back in time (etcd
        restored from a backup) and is believed, not dropped: dropping it left
        every sidecar re-reading in a loop until the revision caught up.
        """
        if obj is None:
            self._observe_absent(now)
            return
        record = LeaseRecord.from_object(obj)
        rolled_back = self.record is not None and _older(
            record.resource_version, self.record.resource_version
        )
        if rolled_back and not quorum:
            return  # a late watch event from before what we already know
        if rolled_back and self.record is not None:
            self._rolled_back(self.record.resource_version, record.resource_version, now)
        for problem in record.problems:
            self._problem(problem)
        changed = (
            rolled_back
            or self.record is None
            or (
                record.resource_version != self.record.resource_version
                or not record.same_content(self.record)
            )
        )
        if changed:
            # Any write counts as a sign of life, even one that left renewTime
            # unchanged (a frozen wall clock): erring late is the safe side.
            self.observed_at = now
            previous = self.holder
            if record.holder != previous:
                self.events.append(Event("holder", record.holder or ""))
        duration = record.lease_duration or self.timing.lease_duration
        self.expires_at = self.observed_at + duration
        self.record = record
        self.known = True
        self.stale = False
        if self.leading and record.holder != self.identity:
            self._step_down(f"the Lease now names {record.holder or 'no holder'}")

    def observe_deleted(self, final: dict[str, Any], now: float) -> None:
        """The watch saw the Lease deleted; ``final`` is its last state, as the API server sent it."""
        record, known = LeaseRecord.from_object(final), self.record
        if known is not None and _older(record.resource_version, known.resource_version):
            return  # a late event: the Lease was created again since
        if known is None or not record.same_content(known):
            self.observe(final, now)  # a write we had not seen: a sign of life
        self._observe_absent(now, last_known=True)

    def _rolled_back(self, known: str, read: str, now: float) -> None:
        """The store went back from ``known`` to ``read``: trust nothing it says is free.

        Whoever led after the backup was taken may still be publishing, and the
        restored record does not name it. Its renewals now fail (they carry a
        version the store no longer has), so its claim ends within a renew
        deadline of now: nobody, us included, claims for a lease duration.
        """
        self.events.append(
            Event("rolled_back", f"resourceVersion went back from {known} to {read}")
        )
        if self.leading:
            self._step_down("the Lease's store went back in time (restored from a backup)")
        self.written_version = None
        self.sent_renew_time = None
        self.quarantine_until = now + self.timing.lease_duration

    def _problem(self, problem: str) -> None:
        """Report ``problem`` once per process: the driver logs each event."""
        if problem not in self._problems_seen:
            self._problems_seen.add(problem)
            self.events.append(Event("problem", problem))

    def _observe_absent(self, now: float, last_known: bool = False) -> None:
        """The Lease does not exist. Who may still be publishing a claim decides the wait.

        Free at once only when its last state is known (the watch's DELETED event
        carries it) and named no holder, or us. Otherwise, when a read finds it
        gone (and at start-up, with nothing seen before), anyone may have led
        under a Lease we never saw: wait a lease duration from now, the longest
        claim such a holder could still be publishing (contract §2). Reads that
        find it still absent do not move that wait.
        """
        if self.leading:
            self._step_down("the Lease was deleted")
        previous = self.record
        if last_known and previous is not None and previous.holder in (None, self.identity):
            self.expires_at = -math.inf
        elif not last_known and (previous is not None or not self.known):
            self.observed_at = now
            self.expires_at = max(self.expires_at, now + self.timing.lease_duration)
        self.record = None
        self.known = True
        self.stale = False

    def on_read(self, obj: dict[str, Any] | None, now: float) -> None:
        # ``failures`` is not reset here: a read that succeeds before a write
        # that fails again (a missing namespace, a webhook denying it) must not
        # restart the backoff from its shortest step.
        self.not_before = -math.inf
        self.observe(obj, now, quorum=True)

    def on_written(self, obj: dict[str, Any], started_at: float, now: float) -> None:
        """A write succeeded; ``started_at`` is when it was sent (the safety clock starts there)."""
        self.failures = 0
        self.not_before = -math.inf
        replaced = self.record
        self.observe(obj, now)
        if self.record is not None and self.record.holder == self.identity and not self.resigned:
            self.written_version = self.record.resource_version
            if not self.leading:
                self.leading = True
                # The token is the version of the write that began this term (contract §2).
                self.fencing_token = version_number(self.record.resource_version)
                if self.fencing_token is None:
                    self._problem("resourceVersion is not a positive integer: no fencing token")
                self.events.append(
                    Event(
                        "leading",
                        "acquired the Lease",
                        fencing_token=self.fencing_token,
                        replaced=replaced,
                    )
                )
            if started_at >= self.renewed_at:
                self.renewed_at = started_at
                self.renewed_wall = self._claimed_wall

    def mark_stale(self) -> None:
        """What we know may be out of date (the watch lost its place): read before acting."""
        self.stale = True

    def on_conflict(self, now: float) -> None:
        """409: someone else wrote first. Re-read at once; the read decides."""
        self.stale = True
        self.not_before = now

    def on_not_found(self, now: float) -> None:
        """404 on a replace: the Lease was deleted under us."""
        self.observe(None, now)

    def on_error(self, now: float, retry_after: float | None = None) -> None:
        """A request failed (API down, 429, 5xx, 403...). Back off; leaders retry every retry period."""
        self.failures += 1
        if self.leading:
            delay = self.timing.retry_period
        else:
            base = self.timing.retry_period * min(2 ** (self.failures - 1), 4)
            delay = base * self.rng.uniform(0.5, 1.0)
            self.stale = True
        if retry_after is not None:
            delay = max(delay, min(retry_after, 4 * self.timing.retry_period))
        self.not_before = now + delay

    def may_release(self, current: LeaseRecord) -> bool:
        """Whether ``current`` is a claim this process wrote and nobody has touched since.

        Releasing lets a successor take over at once. That is safe only for our
        own writes: a record that names us through a hand edit or a crashed
        earlier run is left to be waited out, since whoever led before may still
        be publishing. Our own writes are the last one answered (its
        resourceVersion) and the last one sent, answered or not (a shutdown
        cancels a renew in flight; a connection drops): the API server applied
        it only if the Lease was as we read it, the same rule as for an answered
        write, and it carries the renewTime we stamped, to the microsecond.
        """
        if current.holder != self.identity:
            return False
        if current.resource_version == self.written_version:
            return True
        return self.sent_renew_time is not None and current.renew_time == self.sent_renew_time

    @property
    def holding(self) -> bool:
        """Whether this process has a claim of its own that a release may write over."""
        return self.written_version is not None

    def settled_claim(self) -> LeaseRecord | None:
        """Our last answered claim, if a release may be written against it without a re-read.

        The release carries its resourceVersion, so the API server applies it
        only if nobody wrote since: what a re-read would check. Not while a
        claim is in flight (the last one sent is not the one answered, or the
        watch already showed a newer version): the server may have applied it,
        and a release against the version before would be refused and written
        twice.
        """
        record = self.record
        if record is None or record.holder != self.identity:
            return None
        if record.resource_version != self.written_version:
            return None
        return record if record.renew_time == self.sent_renew_time else None

    def resign(self) -> None:
        """Stop claiming leadership now (shutdown); nothing is written here."""
        if self.leading:
            self._step_down("shutting down")
        self.resigned = True

    def _step_down(self, reason: str) -> None:
        self.leading = False
        self.fencing_token = None
        self.events.append(Event("stepped_down", reason))

    def drain_events(self) -> list[Event]:
        events, self.events = self.events, []
        return events


def _older(candidate: str, current: str) -> bool:
    """Whether resourceVersion ``candidate`` is older than ``current`` (when both are numbers)."""
    older, newer = version_number(candidate), version_number(current)
    return older is not None and newer is not None and older < newer
