"""What a candidate has seen of its Lease, and when a claim it saw can no longer be vouched for.

Pure, clock given. Every judgement is made on this candidate's own monotonic
clock, never on ``renewTime``: node clocks disagree. A claim is waited out for
its ``leaseDurationSeconds`` from the moment this candidate last saw the
record change (any write is a sign of life, even one that leaves ``renewTime``
as it was: a frozen wall clock must not shorten the wait). contract §2 holds
the rules this module applies; ``Election`` decides on top of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

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
    _problems_seen: set[str] = field(default_factory=set)

    @property
    def holder(self) -> str | None:
        return self.record.holder if self.record is not None else None

    def free_at(self) -> float:
        """From when a claim of ours may begin, on the monotonic clock."""
        record = self.record
        if record is None:
            free = self.expires_at  # deleted: the last holder's expiry still stands
        elif record.holder is None:
            free = -math.inf
        elif record.holder == self.identity and record.handoff_from not in (None, self.identity):
            # A hand-off to us: the releasing holder stepped down before writing
            # it, exactly as for an empty holder, and named us to go first.
            free = -math.inf
        else:
            # A record naming someone else, or naming us without our having written
            # it (a hand edit, a crashed earlier run, a write whose answer we lost),
            # is waited out: whoever led before may still be publishing.
            free = self.expires_at
        return max(free, self.quarantine_until)

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
        if (
            rolled_back
            or known is None
            or record.resource_version != known.resource_version
            or not record.same_content(known)
        ):
            self.observed_at = now
            if record.holder != self.holder:
                self.events.append(Event("holder", record.holder or ""))
        self.expires_at = self.observed_at + (record.lease_duration or self.lease_duration)
        self.record, self.known, self.stale = record, True, False
        return rolled_back

    def observe_deleted(self, final: dict[str, Any], now: float) -> bool:
        """The watch saw the Lease deleted (``final``: its last state); False for a late event."""
        record, known = LeaseRecord.from_object(final), self.record
        if known is not None and _older(record.resource_version, known.resource_version):
            return False  # a late event: the Lease was created again since
        if known is None or not record.same_content(known):
            self.observe(final, now)  # a write we had not seen: a sign of life
        self.absent(now, last_known=True)
        return True

    def absent(self, now: float, last_known: bool = False) -> None:
        """The Lease does not exist; who may still be publishing a claim decides the wait.

        Free at once only when its last state is known (the watch's DELETED
        event carries it) and named no holder, or us. Otherwise (a read finds
        it gone; start-up, with nothing seen) anyone may have led under a Lease
        we never saw: wait a lease duration from now (contract §2). Reads that
        find it still absent do not move that wait.
        """
        previous = self.record
        if last_known and previous is not None and previous.holder in (None, self.identity):
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


def _older(candidate: str, current: str) -> bool:
    """Whether resourceVersion ``candidate`` is older than ``current`` (when both are numbers)."""
    older, newer = version_number(candidate), version_number(current)
    return older is not None and newer is not None and older < newer
