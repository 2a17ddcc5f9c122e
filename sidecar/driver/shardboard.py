"""Who stands for which shard, in one pod of a sharded election (contract §2, shards).

Each shard is a plain election (its own elector, Lease and hand-off lock);
the board reacts to them from outside, as every capability does: one
``ShardSeat`` observer per shard's elector, and a ``ShardRoster`` for its
hand-off lock. From the members alive (``members``) and who owns each shard
(its Lease, as its elector last saw it) it computes the assignment
(``core.shards.assign``) and, for each shard:

- this pod is the shard's target: it stands (``Control.stand``), and claims
  it as any follower claims a free Lease, or when a hand-off names it (a
  hand-off naming it is taken up even when the shard is another's: then it
  moves it on, as below);
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
import math
from collections.abc import Callable
from typing import Any

from ..core.election import Event
from ..core.lease import LeaseRecord
from ..core.shards import assign
from ..kit.aio import Background
from ..kit.logs import Logger
from .drain import Drain
from .members import Members
from .observer import HANDED_OVER, Call, Control, Observer, View

#: Why a pod stands aside for a shard (``Control.stand``), and why an owner hands it over.
ELSEWHERE = "shard of another member"
#: The step-down's reason when a shard moves, before the target's name.
MOVE = "shard moves to "


class ShardBoard:
    def __init__(self, shards: int, members: Members, log: Logger) -> None:
        self.shards, self.members, self.log = shards, members, log
        self.identity = members.identity
        self.controls: dict[int, Control] = {}
        self.drains: dict[int, Drain] = {}
        self._standing: dict[int, bool] = {}  # the last stand told to each shard's elector
        self._moving: set[int] = set()
        self._moves = Background("shard moves")
        self._scheduled = False
        self._leaving: asyncio.Task[None] | None = None
        self._after_me: dict[int, str] | None = None  # the assignment once this pod left
        self._owners_at_leave: dict[int, str | None] = {}
        #: Every shard's elector has read its Lease (or seen it on its watch): who holds what
        #: is known, so a pod that starts never stands for a shard another holds.
        self._known = False
        members.on_change = self.changed

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
        out: dict[int, str | None] = {}
        for shard, control in self.controls.items():
            record = control.view().record
            out[shard] = record.holder if record is not None else None
        return out

    def successor(self, shard: int) -> str | None:
        """Whom this pod's release of ``shard`` names: the owner the assignment gives it
        without this pod, from the owners as they were when it left (each release of a stop
        would otherwise see the ones before it land, and name another than the others
        compute), over the members alive now: a pod of the same rollout that stopped since
        would not claim, and the shard would wait out the hand-off's fallback."""
        after, alive = self._after_me or {}, self.members.alive
        if after.get(shard) not in alive | {None}:
            self._after_me = after = self._assign_without_me(alive)
        return after.get(shard)

    def _assign_without_me(self, alive: frozenset[str]) -> dict[int, str]:
        alive = alive - {self.identity}
        held = {i: o for i, o in self._owners_at_leave.items() if o in alive}
        return assign(self.shards, alive, held) if self._known else {}

    def changed(self) -> None:
        """Something moved (members, a Lease): rebalance once, soon, however many told."""
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.rebalance)

    def rebalance(self) -> None:
        self._scheduled = False
        if not self.members.known.is_set() or self._leaving is not None:
            return
        if not self._seen_every_lease():
            return  # who owns what is not known yet, so neither is the balance
        alive = self.members.alive
        owners = self.owners()
        targets = assign(self.shards, alive, {i: o for i, o in owners.items() if o in alive})
        for shard, control in self.controls.items():
            target, view = targets.get(shard), control.view()
            if target == self.identity or _names_me(view, self.identity):
                self._stand(shard, True)
            elif view.state.is_leader:
                if target is not None and shard not in self._moving:
                    self._moving.add(shard)
                    self._moves.spawn(self._move(shard, target))
            else:
                self._stand(shard, False)

    def _seen_every_lease(self) -> bool:
        """Whether every shard's elector has read or watched its Lease (once true, stays)."""
        self._known = self._known or (
            len(self.controls) == self.shards
            and all(math.isfinite(c.view().unchanged_for) for c in self.controls.values())
        )
        return self._known

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
            self._owners_at_leave = owners = self.owners()
            self._after_me = self._assign_without_me(self.members.alive)
            self.log.debug("leaving the members", owners=owners, successors=self._after_me)
            self._leaving = asyncio.ensure_future(self.members.leave())
        await asyncio.shield(self._leaving)


def _names_me(view: View, identity: str) -> bool:
    """The shard's Lease names this pod, which does not lead it: a hand-off to it (or its
    own claim, told to nobody). It takes it up even past its share, then moves it as any
    owner does: left aside, the name is waited out, and by a pod started since the claim it
    releases a lease duration more (contract §2, shards, "Who stands")."""
    record = view.record
    return record is not None and record.holder == identity and not view.state.is_leader


class ShardSeat(Observer):
    """Shard ``shard``'s elector as the board sees it."""

    def __init__(self, board: ShardBoard, shard: int) -> None:
        self.board, self.shard = board, shard
        self._holder: str | None = None

    async def start(self, control: Control) -> None:
        self.board.join(self.shard, control)

    def on_event(self, event: Event, view: View) -> None:
        self.board.changed()

    def on_call(self, call: Call) -> None:
        if call.kind == "read":  # a read that finds no Lease changes no state: it tells here
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
