"""The election state machine: pure, clock injected, no I/O of its own.

Safety model. Guarantee: at no instant do two candidates *publish* leadership,
provided their monotonic clocks run at about the same rate (the margin is
``lease_duration - renew_deadline``) and the API server's writes are
optimistic (each carries the ``resourceVersion`` it read; a stale one gets 409).
Why: a leader publishes only while ``now < S + renew_deadline``, ``S`` being
the local monotonic instant at which its last *successful* write *started*.
Any other candidate saw that write after ``S``, and takes over only once
``lease_duration`` has passed on its own monotonic clock since it last saw the
record change: no earlier than ``S + lease_duration > S + renew_deadline``.
Wall-clock ``renewTime`` is never trusted for takeover (node clocks disagree).
A release, naming a successor or not (contract §2), is written only after the
holder stopped publishing; whoever claims next publishes only from the start
of its own successful write.

Not guaranteed: that the application stops its work at that instant; it must
honour ``valid_until`` (or gate on the probe). The fencing token (the
resourceVersion of the write that began the term) orders leaders, across a
deletion of the Lease too: a later term begins with a later write.

Shape: the elector asks ``next_action(now)`` (a ``Read``, a ``Write`` or a
``Wait``), does it and reports back (``on_read``, ``on_written``,
``on_conflict``, ``on_error``); watch events go to ``observe``. What the Lease
says and when a claim ends is ``Sighting``'s; ``is_leader(now)`` is the only
truth the observers use.
"""

from __future__ import annotations

import datetime as dt
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from . import backoff
from .actions import Action, Read, Wait, Write
from .lease import LeaseRecord, claim, version_number
from .sighting import Event, Sighting
from .timing import Timing

__all__ = ["Action", "Election", "Event", "Read", "Wait", "Write"]

#: A renew is due this much before its instant at the latest: sums of floats land a hair late.
EARLY = 1e-6


@dataclass
class Election:
    identity: str
    lease: str
    namespace: str
    timing: Timing
    wall: Callable[[], dt.datetime] = field(default=lambda: dt.datetime.now(dt.UTC))
    rng: random.Random = field(default_factory=random.Random)

    leading: bool = False
    renewed_at: float = -math.inf
    #: Wall time of the claim behind ``renewed_at``: where ``vouched_until`` is anchored.
    renewed_wall: dt.datetime | None = None
    fencing_token: int | None = None
    #: resourceVersion of our last successful claim: a Lease state we may release.
    written_version: str | None = None
    #: renewTime of the last claim we sent, answered or not: the other one (``may_release``).
    sent_renew_time: dt.datetime | None = None
    #: renewTime of our last successful claim (``settled_claim``).
    written_renew_time: dt.datetime | None = None
    not_before: float = -math.inf
    failures: int = 0
    resigned: bool = False
    events: list[Event] = field(default_factory=list)
    seen: Sighting = field(init=False)
    _claimed_wall: dt.datetime | None = None
    #: The record our last claim was written over (the watch may show our claim first).
    _claimed_over: LeaseRecord | None = None
    #: Our last claim told nobody: its answer was lost (a timeout) or came while ``resigned``.
    _unanswered: bool = False

    def __post_init__(self) -> None:
        self.seen = Sighting(self.identity, self.timing.lease_duration, self.events)

    @property
    def record(self) -> LeaseRecord | None:
        """The Lease as last seen (None when absent or not yet read)."""
        return self.seen.record

    @property
    def holder(self) -> str | None:
        return self.seen.holder

    def is_leader(self, now: float) -> bool:
        deadline = self.renewed_at + self.timing.renew_deadline
        return self.leading and not self.resigned and now < deadline

    def valid_until(self, now: float) -> float | None:
        """Monotonic instant until which leadership is vouched for (None when not leading)."""
        return self.renewed_at + self.timing.renew_deadline if self.is_leader(now) else None

    def vouched_until(self, now: float) -> dt.datetime | None:
        """Wall-clock ``valid_until`` for the application (contract §4): anchored to the wall time
        taken before the last successful claim was sent, so never later than the monotonic one."""
        if not self.is_leader(now) or self.renewed_wall is None:
            return None
        return self.renewed_wall + dt.timedelta(seconds=self.timing.renew_deadline)

    def next_action(self, now: float) -> Action:
        if self.leading and now >= self.renewed_at + self.timing.renew_deadline:
            self._step_down("renew deadline passed without a successful renew")
        if not self.seen.known or self.seen.stale:  # resigned too: to see who leads
            return Read() if now >= self.not_before else Wait(self.not_before)
        if self.resigned:
            return Wait(math.inf)
        if self.leading:
            due = max(self.renewed_at + self.timing.renew_interval, self.not_before)
            if now >= due - EARLY:  # a renew a microsecond early is safe; a float's error is not
                return self._claim("renew")
            return Wait(min(due, self.renewed_at + self.timing.renew_deadline))
        if self._unanswered_claim_seen():
            start = max(self.not_before, self.seen.quarantine_until)
            return self._claim("acquire") if now >= start else Wait(start)
        free = self.seen.free_at()
        if now >= max(free, self.not_before):
            return self._claim("acquire")
        if free > now and free >= self.not_before:
            self.failures = 0  # waiting on a live holder, not on a backoff: the streak is over
        return Wait(max(free, self.not_before))

    def _unanswered_claim_seen(self) -> bool:
        """The Lease shows our last claim, unanswered or answered while resigned (contract §2,
        "a claim whose answer was lost"): nobody else may take it before its lease has passed,
        so we write over it now and lead from that write. Not a claim of ours this process did
        not send (a restarted sidecar's app may act on it), nor one that landed after another's
        claim (``on_written``)."""
        record, sent = self.record, self.sent_renew_time
        mine = record is not None and record.holder == self.identity and record.renew_time == sent
        return mine and self._unanswered and sent is not None and not self.seen.rival_seen

    def _claim(self, purpose: Literal["acquire", "renew"]) -> Write:
        self._claimed_wall = self.sent_renew_time = self.wall()
        self._claimed_over, self._unanswered = self.record, True
        self.seen.claim_sent()
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

    def observe(self, obj: dict[str, Any] | None, now: float, quorum: bool = False) -> None:
        """A fresh view of the Lease (read: ``quorum``, or watch); None when it does not exist."""
        if obj is None:
            self.seen.absent(now)
            self._lost("the Lease was deleted")
            return
        if self.seen.observe(obj, now, quorum):
            self._lost("the Lease's store went back in time (restored from a backup)")
            self.written_version = self.sent_renew_time = None
        holder = self.seen.holder
        if holder != self.identity:
            self._lost(f"the Lease now names {holder or 'no holder'}")

    def observe_deleted(self, final: dict[str, Any], now: float) -> None:
        """The watch saw the Lease deleted; ``final`` is its last state, as the API server sent it."""
        if self.seen.observe_deleted(final, now):
            self._lost("the Lease was deleted")

    def _lost(self, reason: str) -> None:
        if self.leading:
            self._step_down(reason)

    def on_read(self, obj: dict[str, Any] | None, now: float, first_term: bool = False) -> None:
        """A quorum read; ``first_term``: the Lease is absent and the election never had one."""
        # ``failures`` stay: a write that fails again (no namespace) must not restart the backoff.
        self.not_before = -math.inf
        if obj is None and first_term:
            self.seen.absent(now, first_term=True)
        else:
            self.observe(obj, now, quorum=True)

    def on_written(self, obj: dict[str, Any], started_at: float, now: float) -> None:
        """A write succeeded; ``started_at`` is when it was sent (the safety clock starts there)."""
        self.failures, self.not_before, replaced = 0, -math.inf, self._claimed_over
        over = self._term_begun_under_create()
        self._unanswered = self.resigned and over is None  # told nobody: taken up on rejoining
        held_until = self.seen.expires_at
        self.observe(obj, now)
        if over is not None:
            # A create has no precondition but absence: it landed after that term's Lease
            # was deleted, and that holder may still be publishing. Hold the new Lease (so
            # nobody else claims) without leading, until that claim's lease has passed.
            self.seen.expires_at = max(self.seen.expires_at, held_until)
            self.seen.problem(
                f"{over.holder} began a term and its Lease was deleted while this candidate's "
                "create was in flight; holding the Lease without leading for a lease duration"
            )
            return
        if self.record is not None and self.record.holder == self.identity and not self.resigned:
            self.written_version = self.record.resource_version
            self.written_renew_time = self.record.renew_time
            if not self.leading:
                self.leading = True
                # The token is the version of the write that began this term (contract §2).
                token = self.fencing_token = version_number(self.record.resource_version)
                if token is None:
                    self.seen.problem("resourceVersion is not a positive integer: no fencing token")
                self.events.append(
                    Event("leading", "acquired the Lease", fencing_token=token, replaced=replaced)
                )
            if started_at >= self.renewed_at:
                self.renewed_at = started_at
                self.renewed_wall = self._claimed_wall

    def _term_begun_under_create(self) -> LeaseRecord | None:
        """The claim of another holder that a read or the watch showed while our create was in
        flight, if the last write was a create (contract §2, "No Lease"); else None."""
        seen = self.seen.claim_seen
        if self._claimed_over is not None or seen is None or seen is self.seen.sent_over:
            return None
        return seen if seen.holder not in (None, self.identity) else None

    def mark_stale(self) -> None:
        """What we know may be out of date (the watch lost its place): read before acting."""
        self.seen.stale = True

    def on_conflict(self, now: float) -> None:
        """409: someone else wrote first. Re-read at once; the read decides."""
        self._unanswered, self.not_before, self.seen.stale = False, now, True

    def on_not_found(self, now: float) -> None:
        """404 on a replace: the Lease was deleted under us."""
        self._unanswered = False
        self.observe(None, now)

    def on_error(self, now: float, retry_after: float | None = None) -> None:
        """A request failed (API down, 429, 5xx, 403...). Back off; leaders retry every retry period."""
        self.failures += 1
        if self.leading:
            delay = self.timing.retry_period
        else:
            period = self.timing.retry_period
            delay = backoff.delay(self.failures, period, 4 * period, rng=self.rng)
            self.seen.stale = True
        if retry_after is not None:
            delay = max(delay, min(retry_after, 4 * self.timing.retry_period))
        self.not_before = now + delay

    def may_release(self, current: LeaseRecord) -> bool:
        """Whether ``current`` is a claim this process wrote and nobody has touched since (contract
        §2, release): the last one answered, by resourceVersion, or the last one sent, answered or
        not (a shutdown cancels a renew in flight), by its renewTime to the microsecond."""
        return current.holder == self.identity and (
            current.resource_version == self.written_version
            or (self.sent_renew_time is not None and current.renew_time == self.sent_renew_time)
        )

    @property
    def holding(self) -> bool:
        """Whether this process has a claim of its own that a release may write over."""
        return self.written_version is not None

    def settled_claim(self) -> LeaseRecord | None:
        """Our last answered claim, if a release may be written against it without a re-read
        (its resourceVersion makes the API server check what a re-read would); None while a
        claim is in flight: the server may have applied it, and the release would be refused.
        A later version that leaves the claim as it was (a candidate joining or leaving the
        election's roster: annotations) is that claim still, and the release goes over it."""
        record = self.record
        if record is None or record.holder != self.identity or self.written_version is None:
            return None
        settled = record.renew_time == self.sent_renew_time == self.written_renew_time
        newer = (version_number(record.resource_version) or 0) > (
            version_number(self.written_version) or math.inf
        )
        same = record.resource_version == self.written_version
        return record if settled and (same or newer) else None

    def resign(self, reason: str = "shutting down") -> None:
        """Stop claiming now, until ``rejoin`` (shutdown, a hand-over); nothing is written here."""
        if self.leading:
            self._step_down(reason)
        self.resigned = True

    def rejoin(self) -> None:
        """Claim again by the usual rules; an absence seen while resigned is read again."""
        self.resigned = False
        self.seen.stale = self.seen.stale or self.record is None

    def _step_down(self, reason: str) -> None:
        self.leading, self.fencing_token = False, None
        self.events.append(Event("stepped_down", reason))

    def drain_events(self) -> list[Event]:
        events, self.events[:] = self.events[:], []  # in place: the sighting appends to it
        return events
