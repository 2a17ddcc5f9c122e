"""What a candidate has seen of its Lease, and when a claim it saw can no longer be vouched for.

Pure, clock given. Every judgement is made on this candidate's own monotonic
clock, never on ``renewTime``: node clocks disagree. A claim is waited out for
its ``leaseDurationSeconds`` from the moment this candidate last saw the
record change (any write is a sign of life, even one that leaves ``renewTime``
as it was: a frozen wall clock must not shorten the wait; but not one that
only adds or removes roster entries, which other candidates write). contract §2 holds
the rules this module applies; ``Election`` decides on top of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from . import roster
from .lease import LeaseRecord, version_number


@dataclass(frozen=True)
class Event:
    """Something the elector tells its observers about."""

    kind: Literal["leading", "stepped_down", "holder", "problem", "rolled_back"]
    detail: str
    fencing_token: int | None = None
    #: ``leading``: the record the acquiring write replaced (a hand-off to someone else, maybe).
    replaced: LeaseRecord | None = None


@dataclass
class Sighting:
    identity: str
    lease_duration: float
    #: Where the events go (the election's list).
    events: list[Event] = field(default_factory=list)
    record: LeaseRecord | None = None
    #: A read or the watch has told us whether the Lease exists.
    known: bool = False
    #: What we know may be out of date (the watch lost its place): read before acting.
    stale: bool = False
    observed_at: float = -math.inf
    expires_at: float = -math.inf
    #: After a rollback of the store, nobody's claim is judged free before this.
    quarantine_until: float = -math.inf
    #: The last claim seen that its holder may still be publishing (not a release).
    claim_seen: LeaseRecord | None = None
    #: ``claim_seen`` when our last claim went out (``claim_sent``).
    sent_over: LeaseRecord | None = None
    #: Another holder's claim was seen since then.
    rival_seen: bool = False
    _problems_seen: set[str] = field(default_factory=set)

    @property
    def holder(self) -> str | None:
        return self.record.holder if self.record is not None else None

    def free_at(self) -> float:
        """From when a claim of ours may begin, on the monotonic clock (contract §2).

        A release (empty holder) or a hand-off is free at once, to anyone or to
        the successor it names, only when it is the release of the very claim
        this candidate saw live: same term (``acquireTime``, ``leaseTransitions``),
        written by its holder. One not seen so (at start-up; after a gap; a
        store restored from a backup, bumped or not; a stale marker under
        another tool's claim) is waited out for a lease duration from when it
        was seen, as an absent Lease is: whoever led since may still be
        publishing; or for its own duration, when that is longer (the marker
        under a client-go claim: that claim's holder may publish for as long as
        it wrote). Anything else naming a holder, us included when we did not
        write it, is waited out for its own duration.
        """
        record = self.record  # deleted: the last expiry still stands (``absent``)
        free = self.expires_at if record is None else self._free_over(record)
        return max(free, self.quarantine_until)

    def _free_over(self, record: LeaseRecord) -> float:
        """When a claim over ``record`` may begin, a rollback's quarantine aside."""
        if not _released(record):
            return self.expires_at
        if self._released_from_seen(record):
            return -math.inf if record.holder in (None, self.identity) else self.expires_at
        return max(self.expires_at, self.observed_at + self.lease_duration)

    def _released_from_seen(self, record: LeaseRecord) -> bool:
        seen = self.claim_seen
        return (
            seen is not None
            and (record.acquire_time, record.transitions) == (seen.acquire_time, seen.transitions)
            and record.handoff_from in (None, seen.holder)
        )

    def observe(self, obj: dict[str, Any], now: float, quorum: bool = False) -> bool:
        """A view of the Lease from a read (``quorum``) or the watch; True if the store went back.

        A watch event older than what we know is late and dropped. A quorum read
        older than what we know means the store went back in time (etcd restored
        from a backup): it is believed, and nobody's claim is judged free for a
        lease duration (whoever led after the backup is not named in it, and its
        renewals now fail, so its claim ends within a renew deadline).
        """
        record, known = LeaseRecord.from_object(obj), self.record
        rolled_back = known is not None and _older(record.resource_version, known.resource_version)
        if rolled_back and not quorum:
            return False
        if rolled_back and known is not None:
            detail = f"resourceVersion went back from {known.resource_version} to {record.resource_version}"
            self.events.append(Event("rolled_back", detail))
            self.quarantine_until = now + self.lease_duration
        for problem in record.problems:
            self.problem(problem)
        moved = known is None or (
            record.resource_version != known.resource_version and not _joined_or_left(known, record)
        )
        if rolled_back or moved or not record.same_content(known):
            self.observed_at = now
            if record.holder != self.holder:
                self.events.append(Event("holder", record.holder or ""))
        self.expires_at = self.observed_at + (record.lease_duration or self.lease_duration)
        self.record, self.known, self.stale = record, True, False
        if not _released(record):
            self.claim_seen = record
            over = self.sent_over
            news = over is None or record.resource_version != over.resource_version
            self.rival_seen |= record.holder not in (None, self.identity) and news
        return rolled_back

    def claim_sent(self) -> None:
        """A claim of ours goes out over what we saw: another's claim seen from now is news."""
        self.sent_over, self.rival_seen = self.claim_seen, False

    def observe_deleted(self, final: dict[str, Any], now: float) -> bool:
        """The watch saw the Lease deleted (``final``: its last state); False for a late event."""
        record, known = LeaseRecord.from_object(final), self.record
        if known is not None and _older(record.resource_version, known.resource_version):
            return False  # a late event: the Lease was created again since
        if known is None or not record.same_content(known):
            self.observe(final, now)  # a write we had not seen: a sign of life
        self.absent(now, last_known=True)
        return True

    def absent(self, now: float, last_known: bool = False, first_term: bool = False) -> None:
        """The Lease does not exist; who may still be publishing a claim decides the wait.

        When its last state is known (the watch's DELETED event carries it),
        the deletion is judged as that state was: a release or hand-off as
        ``free_at`` judges one (free at once only when seen released from the
        claim it releases, else waited out as if it were still there), a
        claim of ours at once, anyone else's for its duration. Free at once,
        too, when the election never had a Lease (``first_term``: the roster
        holds no mark of one). Otherwise (a read finds it gone; start-up, with
        nothing seen) anyone may have led under a Lease we never saw: wait a
        lease duration from now. Reads that find it still absent do not move
        that wait.
        """
        previous = self.record
        if first_term:
            self.expires_at = -math.inf
        elif last_known and previous is not None:
            if _released(previous):
                self.expires_at = self._free_over(previous)
            elif previous.holder == self.identity:
                self.expires_at = -math.inf
        elif not last_known and (previous is not None or not self.known):
            self.observed_at = now
            self.expires_at = max(self.expires_at, now + self.lease_duration)
        self.record, self.known, self.stale = None, True, False

    def problem(self, problem: str) -> None:
        """Report ``problem`` once per process."""
        if problem not in self._problems_seen:
            self._problems_seen.add(problem)
            self.events.append(Event("problem", problem))


def _joined_or_left(known: LeaseRecord, record: LeaseRecord) -> bool:
    """A write that only adds or removes roster entries (contract §2, "the roster"): another
    candidate's, not the holder's, so no sign of the holder's life."""
    return record.same_content(known) and roster.entries_only(known.raw, record.raw)


def _released(record: LeaseRecord) -> bool:
    """A release (no holder) or a hand-off (the holder named by someone else who released)."""
    return record.holder is None or record.handoff_from not in (None, record.holder)


def _older(candidate: str, current: str) -> bool:
    """Whether resourceVersion ``candidate`` is older than ``current`` (when both are numbers)."""
    older, newer = version_number(candidate), version_number(current)
    return older is not None and newer is not None and older < newer
