"""What the application is told: the state file, change notifications and the HTTP endpoints.

An observer over the mechanisms of ``publish``: the state file is written first
at start-up ("not leader", so a file left by a crashed run never claims
leadership), then on every new state but a hand-off seen by a follower (its
claim is told instead); every state written is a change notification; the
HTTP endpoints answer from the election's live view at request time
(``Control.view``), so ``/leader`` turns 503 the instant leadership lapses
even when the loop is busy. Before the release every
subscriber has been told "not leader" or lost its stream; the endpoints close
last (contract §4, §5).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from ..core.state import State
from ..kit.logs import Logger
from ..publish.changes import Changes
from ..publish.http import Action, StatusServer
from ..publish.statefile import StateDirError, StateFile
from .drain import Drain
from .observer import Control, Observer, View


class AppPublisher(Observer):
    def __init__(
        self,
        state_dir: Path,
        port: int,
        metrics: Callable[[], str],
        drain: Drain,
        log: Logger,
        actions: dict[str, Action] | None = None,
    ):
        self.file, self.port, self.metrics, self.log = StateFile(state_dir), port, metrics, log
        self.drain, self.actions = drain, actions
        self.changes: Changes | None = None
        self._told_leading = False
        self.server: StatusServer | None = None

    async def start(self, control: Control) -> None:
        """The first "not leader", then the port; raises ``StateDirError`` or ``OSError``."""
        state = self._told(control.view().state)
        self.file.check_writable()
        self.file.write(state, force=True)
        self.changes = Changes(state)
        self.drain.on_notice = lambda: self.on_state(control.view())
        if self.port:
            live, healthy = (lambda: self._told(control.view().state)), control.healthy
            self.server = StatusServer(
                self.port, live, healthy, self.metrics, self.log, self.changes, self.actions
            )
            await self.server.start()

    def _told(self, state: State) -> State:
        """``state`` with the drain under way, if any (``drain``)."""
        notice = self.drain.notice
        return state if notice is None else dataclasses.replace(state, drain=notice)

    def on_state(self, view: View) -> None:
        if self._hand_off_to_pass_over(view):
            return
        state = self._told(view.state)
        self._told_leading = state.is_leader
        if self.changes is not None:
            self.changes.offer(state)
        try:
            self.file.write(state)
            self.log.forget("statefile")
        except StateDirError as err:
            self.log.once("statefile", "error", str(err) + "; readers must rely on valid_until")

    def _hand_off_to_pass_over(self, view: View) -> bool:
        """A hand-off names who is about to lead, not a term; its successor's claim follows in
        milliseconds and is what is told, so every follower writes once per handover, not twice
        (the successor too, as its claim goes out). One that leads or led is told as ever: a
        step-down is never held back. Unclaimed, it ends by a write that is told: the releaser's
        emptying of the Lease, or the claim of a follower that waited it out (contract §4)."""
        record = view.record
        handing_off = record is not None and record.handoff_from is not None
        return handing_off and not view.state.is_leader and not self._told_leading

    async def before_release(self) -> None:
        """Every subscriber told "not leader" (or its stream closed), bounded, before a successor can lead."""
        if self.server is not None:
            await self.server.notify.flush()

    async def after_release(self) -> None:
        if self.server is not None:
            await self.server.close()
