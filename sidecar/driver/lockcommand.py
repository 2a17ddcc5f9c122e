"""``grelmicro-sidecar lock -- CMD...``: run a command only while this process leads (contract §7).

An observer of the elector: it starts the command (``command``, through its
guard) once this process leads, with ``LEADER_ELECTION_FENCING_TOKEN``,
``LEADER_ELECTION_STATE_FILE`` and ``LEADER_ELECTION_IDENTITY`` in its
environment, and passes every new ``valid_until`` on as the deadline.

Guarantees ("the tree": the command and every process it started):

- no process of the tree outlives the leadership it was started under: each
  gets SIGTERM a grace period before ``valid_until`` (or as soon as leadership
  is seen lost) and SIGKILL at ``valid_until``; both the guard and this
  process enforce it, so freezing or killing either one does not extend it;
- when the command exits, what it left is ended too, the elector stops, and
  the Lease is released only once nothing of the tree is left (what outlives
  SIGKILL past ``valid_until`` leaves it to expire, unreleased); ``lock`` exits
  with the command's code (128 + n for a signal), 75 (EX_TEMPFAIL) when
  leadership was lost under it, 126 when the guard never reported its start;
- SIGTERM, SIGINT, SIGHUP, SIGUSR1 and SIGUSR2 are forwarded to the command
  while it runs (the Lease is held until it exits); before it runs, SIGTERM or
  SIGINT stops ``lock`` at once, 128 + n.
"""

from __future__ import annotations

import asyncio
import math
import signal
import time
from pathlib import Path
from typing import Any

from ..kit.logs import Logger
from . import guard
from .command import KILL_MARGIN, Command
from .observer import Control, Observer, View

#: leadership was lost while the command ran, or before its guard could start it (EX_TEMPFAIL)
LOST_EXIT = guard.LATE_EXIT
#: a guard that has not reported the command's end this long after its SIGKILL is killed
GUARD_STUCK = 1.0
#: Passed on to the command and nothing else (SIGTERM and SIGINT stop ``lock`` when no
#: command runs).
PASSED_ON = (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


class LockCommand(Observer):
    def __init__(self, argv: list[str], grace: float, state_file: Path, log: Logger):
        self.command = Command(argv, grace, log)
        self.grace, self.state_file, self.log = grace, state_file, log
        self.lost = False
        self.interrupted: int | None = None
        self.code: int | None = None
        self._view: View | None = None
        self._news = asyncio.Event()
        self._elector: Control | None = None

    async def start(self, control: Control) -> None:
        self._elector = control
        loop = asyncio.get_running_loop()
        for sig in PASSED_ON:
            loop.add_signal_handler(sig, self.on_signal, sig)
        self.command.adopt_orphans(loop)
        control.spawn(self._supervise(), "lock")

    def on_state(self, view: View) -> None:
        self._view = view
        self._news.set()

    async def before_release(self) -> None:
        """The whole tree is gone before the Lease is released, whatever stopped the elector."""
        command = self.command
        if command.running and command.guard is not None:
            command.stop(time.monotonic())
            if command.ending is not None:
                command.ending.terminate()
            try:
                async with asyncio.timeout(self.grace + 2 * GUARD_STUCK):
                    await command.guard.wait()
            except TimeoutError:
                command.kill_guard()
        if command.guard is not None and self.code is None:
            self.code = await command.ended()
        asyncio.get_running_loop().remove_signal_handler(signal.SIGCHLD)

    def keeps_lease(self) -> bool:
        """A process of the tree outlived SIGKILL (stuck in the kernel): the Lease is left to
        expire, so a successor leads no sooner than had this process been killed (contract §7)."""
        return self.command.outlived

    def on_signal(self, sig: int) -> None:
        """SIGTERM and friends: to the command while it runs, else a stop."""
        if self.command.running:
            self.log.info("forwarding a signal to the command", signal=signal.Signals(sig).name)
            self.command.tell(f"SIG {int(sig)}")
        elif sig in (signal.SIGTERM, signal.SIGINT) and self._elector is not None:
            self.interrupted = sig
            self._elector.stop()

    def exit_code(self, elector_code: int) -> int:
        """``lock``'s exit code, once the elector has stopped."""
        if self.lost:
            return LOST_EXIT
        if self.code is not None:
            return self.code
        if self.interrupted is not None:
            return 128 + self.interrupted
        return elector_code

    async def _supervise(self) -> None:
        """Start the command on leading, move its deadline, end it on loss; stop when it ends."""
        command, deadline = self.command, math.nan
        while True:
            now = time.monotonic()
            valid = self._view.valid_until if self._view is not None else None
            ending = command.ending
            if command.guard is None:
                if valid is not None:
                    deadline = valid - KILL_MARGIN
                    await self._start(deadline)
            elif valid is not None and not self.lost and valid - KILL_MARGIN != deadline:
                deadline = valid - KILL_MARGIN
                command.tell(f"D {deadline!r}")
                if ending is not None:
                    ending.deadline = deadline
            elif valid is None and not self.lost:
                self.lost = True
                self.log.warning("leadership lost: ending the command", grace=self.grace)
                command.stop(now)
            elif command.running and ending is not None and now > ending.kill_at() + GUARD_STUCK:
                # The tree was SIGKILLed (by us, at the latest); a guard that has not
                # reported it is frozen or stuck: it goes too.
                self.log.warning("the guard did not report the command's end; killing it")
                command.kill_guard()
            command.check_report(now)
            pause = ending.enforce(now) if ending is not None else math.inf
            pause = min(pause, max(0.0, command.report_due - now), 1.0)
            if await self._wait(pause):
                await self._ended()
                await asyncio.Future()  # parked: the elector's shutdown cancels it

    async def _wait(self, timeout: float) -> bool:
        """Until news, the guard's end or ``timeout``; True when the guard has exited."""
        self._news.clear()
        waits: set[asyncio.Future[Any]] = {asyncio.ensure_future(self._news.wait())}
        if self.command.guard is not None:
            waits.add(asyncio.ensure_future(self.command.guard.wait()))
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        for w in waits:
            w.cancel()
        return self.command.guard is not None and not self.command.running

    async def _start(self, deadline: float) -> None:
        state = self._view.state if self._view is not None else None
        token = state.fencing_token if state is not None else None
        env = {
            "LEADER_ELECTION_FENCING_TOKEN": str(token),
            "LEADER_ELECTION_STATE_FILE": str(self.state_file),
            "LEADER_ELECTION_IDENTITY": state.identity if state is not None else "",
        }
        await self.command.start(deadline, env, token)

    async def _ended(self) -> None:
        """The guard exited: the tree gone, note the code (or the deadline's loss), stop."""
        ending = self.command.ending
        if ending is not None and time.monotonic() >= ending.deadline - self.grace:
            self.lost = True  # ended by the deadline (a frozen lock sees it only now)
        self.code = await self.command.ended()
        if self._elector is not None:
            self._elector.stop()
