"""Who stands for which shard, in one pod of a sharded election (contract §2, shards).

Each shard is a plain election (its own elector, Lease and hand-off lock);
the board reacts to them from outside, as every capability does: one
``ShardSeat`` observer per shard's elector, and a ``ShardRoster`` for its
hand-off lock. From the members alive (``members``) and who owns each shard
(its Lease, as its elector last saw it) it computes the assignment
(``core.shards.assign``) and, for each shard:

- this pod is the shard's target: it stands (``Control.stand``), and claims
  it as any follower claims a free Lease, or when a hand-off names it;
- another member is: a follower stands aside; the owner hands it over
  (``Control.hand_over``): "not owner" is told first, then the drain, then
  the release names the target, which claims within milliseconds.

At shutdown this pod leaves the members first (its heartbeat Lease deleted)
and each shard's release names the owner the assignment gives without it.

Guarantees: it never makes a pod claim a Lease another holds (each shard's
election still decides who owns it, and a move is a hand-off); whatever the
members' views, it converges once they agree; one move per shard at a time.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

from ..core import backoff
from ..core.election import Event
from ..core.lease import MANAGED_BY_LABEL, MANAGED_BY_VALUE, LeaseRecord
from ..core.shards import assign
from ..kit.aio import Background
from ..kit.logs import Logger
from ..kube.errors import ApiError
from .drain import Drain
from .members import Members
from .observer import HANDED_OVER, Control, Observer, View

#: Why a pod stands aside for a shard (``Control.stand``), and why an owner hands it over.
ELSEWHERE = "shard of another member"
#: The step-down's reason when a shard moves, before the target's name.
MOVE = "shard moves to "
MANAGED = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"
LIST_FAILED = "cannot list the shards' Leases; this pod stands for no shard until it can"


class ShardBoard:
    def __init__(self, shards: int, leases: list[str], members: Members, log: Logger) -> None:
        self.shards, self.leases, self.members, self.log = shards, leases, members, log
        self.identity = members.identity
        self.controls: dict[int, Control] = {}
        self.drains: dict[int, Drain] = {}
        self._standing: dict[int, bool] = {}  # the last stand told to each shard's elector
        self._moving: set[int] = set()
        self._moves = Background("shard moves")
        self._scheduled = False
        self._leaving: asyncio.Task[None] | None = None
        self._after_me: dict[int, str] | None = None  # the assignment once this pod left
        #: Each shard's holder as one list found it at start-up (None: not listed yet): who
        #: holds what before every shard's elector has read its own Lease, so that a pod
        #: that starts never stands for a shard another holds.
        self._listed: dict[int, str | None] | None = None
        members.on_change = self.changed

    async def list_owners(self) -> None:
        """Who owns each shard, by one list of the election's Leases (retried until it
        answers: until then this pod stands for no shard)."""
        failures = 0
        while True:
            try:
                items, _ = await self.members.store.list(label_selector=MANAGED)
                break
            except ApiError as err:
                failures += 1
                self.log.once("shards-list", "warning", LIST_FAILED, error=str(err))
                await asyncio.sleep(backoff.delay(failures, 1.0, 30.0))
        self.log.forget("shards-list")
        holders = {
            LeaseRecord.from_object(o).name: LeaseRecord.from_object(o).holder for o in items
        }
        self._listed = {i: holders.get(lease) for i, lease in enumerate(self.leases)}
        self.changed()

    def seat(self, shard: int, drain: Drain) -> ShardSeat:
        """The observer that ties shard ``shard``'s elector to the board."""
        self.drains[shard] = drain
        return ShardSeat(self, shard)

    def join(self, shard: int, control: Control) -> None:
        """Shard ``shard``'s elector, standing aside until the board has seen enough."""
        self.controls[shard] = control
        self._standing[shard] = False
        control.stand(False, ELSEWHERE)

    def owners(self) -> dict[int, str | None]:
        """Who owns each shard, as its elector last saw the Lease (the named successor of a
        hand-off included: it is about to)."""
        out = dict(self._listed or {})
        for shard, control in self.controls.items():
            record = control.view().record
            if record is not None:
                out[shard] = record.holder
        return out

    def successor(self, shard: int) -> str | None:
        """Whom this pod's release of ``shard`` names: the owner the assignment gives it
        without this pod, as computed once when it left (each release of a stop would
        otherwise see the ones before it land, and name another than the others compute)."""
        return (self._after_me or {}).get(shard)

    def changed(self) -> None:
        """Something moved (members, a Lease): rebalance once, soon, however many told."""
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.rebalance)

    def rebalance(self) -> None:
        self._scheduled = False
        if not self.members.known.is_set() or self._leaving is not None:
            return
        if self._listed is None or len(self.controls) < self.shards:
            return  # who owns what is not known yet, so neither is the balance
        alive = self.members.alive
        owners = self.owners()
        targets = assign(self.shards, alive, {i: o for i, o in owners.items() if o in alive})
        for shard, control in self.controls.items():
            target = targets.get(shard)
            if target == self.identity:
                self._stand(shard, True)
            elif control.view().state.is_leader:
                if target is not None and shard not in self._moving:
                    self._moving.add(shard)
                    self._moves.spawn(self._move(shard, target))
            else:
                self._stand(shard, False)

    def _stand(self, shard: int, candidate: bool) -> None:
        if self._standing.get(shard) != candidate:
            self._standing[shard] = candidate
            self.log.debug(
                "standing for a shard" if candidate else "aside for a shard", shard=shard
            )
            self.controls[shard].stand(candidate, ELSEWHERE)

    async def _move(self, shard: int, target: str) -> None:
        control, reason = self.controls[shard], f"{MOVE}{target}"
        try:
            self.log.info("moving a shard", shard=shard, to=target)
            drained = functools.partial(self.drains[shard].until_acknowledged, reason)
            await control.hand_over(target, reason, drained)
            self._standing[shard] = False  # a follower now, held back by this, not the hand-over
            control.stand(False, ELSEWHERE)
            control.stand(True, HANDED_OVER)
        finally:
            self._moving.discard(shard)
            self.changed()

    async def leave(self) -> None:
        """Shutdown: out of the members once (every shard's release waits for it)."""
        if self._leaving is None:
            self._moves.cancel()
            alive, owners = self.members.alive - {self.identity}, self.owners()
            held = {i: o for i, o in owners.items() if o in alive}
            self._after_me = assign(self.shards, alive, held) if self._listed else {}
            self.log.debug("leaving the members", owners=owners, successors=self._after_me)
            self._leaving = asyncio.ensure_future(self.members.leave())
        await asyncio.shield(self._leaving)


class ShardSeat(Observer):
    """Shard ``shard``'s elector as the board sees it."""

    def __init__(self, board: ShardBoard, shard: int) -> None:
        self.board, self.shard = board, shard
        self._holder: str | None = None

    async def start(self, control: Control) -> None:
        self.board.join(self.shard, control)

    def on_event(self, event: Event, view: View) -> None:
        self.board.changed()

    def on_lease(self, record: LeaseRecord) -> None:
        if record.holder != self._holder:  # a renewal moves nothing
            self._holder = record.holder
            self.board.changed()

    async def before_release(self) -> None:
        await self.board.leave()


class ShardRoster:
    """The hand-off's roster of one shard (``release.Roster``): a release names the member
    the assignment gives the shard to without this pod. Nothing is written: the members'
    Leases are the roster, so no candidate joins a shard's Lease."""

    on_quiet: Callable[[], None] | None = None

    def __init__(self, board: ShardBoard, shard: int) -> None:
        self.board, self.shard = board, shard

    def quiet(self) -> bool:
        return False

    def successor(self, record: LeaseRecord) -> str | None:
        return self.board.successor(self.shard)

    async def forget(self, identity: str, timeout: float) -> None:
        pass

    def handed_off(self, successor: str) -> None:
        pass

    def departed(self, record: LeaseRecord) -> list[str]:
        return []

    def seen(self, obj: dict[str, Any]) -> None:
        pass
