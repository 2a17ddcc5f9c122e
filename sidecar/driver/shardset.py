"""A sharded election in one pod: N electors run as one, told to the app as one state.

Each shard is an unchanged elector over its own Lease (``shardboard`` decides
who stands for which). This runs them together: one start, one stop (every
shard says "not owner", leaves the members, releases), one exit code (the
worst), and one published state whose ``shards`` lists every shard with its
owner, and, for those this pod owns, the fencing token and ``valid_until``
(contract §4, shards). The state, file and HTTP alike, is told through one
``AppPublisher``, which sees this as its ``Control``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..core.state import State
from .apppublisher import AppPublisher
from .drain import Drain
from .elector import Elector
from .observer import Observer, View
from .shardboard import ShardBoard


class ShardSet:
    def __init__(
        self,
        electors: list[Elector],
        board: ShardBoard,
        published: AppPublisher,
    ) -> None:
        #: Each shard's, in order (the wiring fills it after: each one's observers tell this).
        self.electors, self.board = electors, board
        self.published = published
        self.runs: list[asyncio.Task[int]] = []  # each shard's ``Elector.run``

    # ---- Control, for the publisher ------------------------------------------
    def view(self) -> View:
        """Every shard at this instant: the pod owns what its ``shards`` say it owns."""
        views = [elector.view() for elector in self.electors]
        first = views[0].state
        shards = [_shard(i, v.state, self.board.drains[i]) for i, v in enumerate(views)]
        state = State(
            election=first.election,
            namespace=first.namespace,
            lease=self.board.members.lease,
            identity=first.identity,
            is_leader=any(v.state.is_leader for v in views),
            holder=None,
            fencing_token=None,
            acquired_at=None,
            renewed_at=None,
            valid_until=None,
            updated_at=first.updated_at,
            shards=shards,
        )
        return View(state, None, None)

    def healthy(self) -> bool:
        return all(elector.healthy() for elector in self.electors)

    def stop(self) -> None:
        for elector in self.electors:
            elector.stop()

    def resign_now(self) -> None:
        for elector in self.electors:
            elector.election.resign()
        self.published.on_state(self.view())

    # ---- the run -----------------------------------------------------------
    async def start(self) -> None:
        """The app's first "owns nothing", then every shard's observers."""
        await self.published.start(self)  # type: ignore[arg-type]  # a Control for the publisher
        for elector in self.electors:
            await elector.start()

    async def run(self) -> int:
        """Every shard until ``stop`` or one's failure (which stops the rest); the worst code."""
        self.board.members.start()
        self.runs = runs = [asyncio.create_task(elector.run()) for elector in self.electors]
        await asyncio.wait(runs, return_when=asyncio.FIRST_COMPLETED)
        self.stop()
        codes = await asyncio.gather(*runs)
        await self.board.members.stop()
        await self.published.after_release()
        return max(codes)


def _shard(shard: int, state: State, drain: Drain) -> dict[str, Any]:
    """One shard as the app is told it (what changes a version only: no renew times)."""
    return {
        "shard": shard,
        "lease": state.lease,
        "is_leader": state.is_leader,
        "holder": state.holder,
        "fencing_token": state.fencing_token,
        "acquired_at": state.acquired_at,
        "valid_until": state.valid_until,
        "drain": drain.notice,
    }


class Relay(Observer):
    """Tells the publisher the whole set's state whenever one shard's changes; before a
    shard's release, every subscriber has heard that this pod no longer owns it."""

    def __init__(self, shards: ShardSet) -> None:
        self.shards = shards

    def on_state(self, view: View) -> None:
        self.shards.published.on_state(self.shards.view())

    async def before_release(self) -> None:
        await self.shards.published.before_release()
