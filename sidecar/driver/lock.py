"""``grelmicro-sidecar lock -- CMD...``: run a command only while this process leads (contract §7).

An observer of the elector: it starts the command (through ``guard``, its own
process) once this process leads, with ``LEADER_ELECTION_FENCING_TOKEN`` and
``LEADER_ELECTION_STATE_FILE`` in its environment, and passes every new
``valid_until`` to the guard as a deadline on the shared monotonic clock.

Guarantees:

- the command never outlives the leadership it was started under: it gets
  SIGTERM a grace period before ``valid_until`` (or as soon as leadership is
  seen lost) and SIGKILL at ``valid_until``. Both the guard and this process
  enforce the deadline, so freezing or killing either one does not extend it;
- when the command exits, the elector stops (the Lease is released once the
  command is gone) and ``lock`` exits with the command's code (128 + n for a
  signal); when leadership was lost under it, 75 (EX_TEMPFAIL: run it again
  to take part again);
- SIGTERM, SIGINT, SIGHUP, SIGUSR1 and SIGUSR2 are forwarded to the command
  while it runs (it decides when to exit, and the Lease is held until it does);
  before it runs, SIGTERM or SIGINT stops ``lock`` at once, 128 + n.
"""

from __future__ import annotations

import asyncio
import math
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from ..kit.logs import Logger
from . import guard
from .observer import Control, Observer, View

#: leadership was lost while the command ran (EX_TEMPFAIL)
LOST_EXIT = 75
#: the command is killed this long before ``valid_until``, not at it
KILL_MARGIN = 0.1
#: a guard that has not reported the command's end this long after its SIGKILL is killed
GUARD_STUCK = 1.0
#: Passed on to the command and nothing else (SIGTERM and SIGINT stop ``lock`` when
#: no command runs).
PASSED_ON = (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
GUARD = Path(guard.__file__)


class Lock(Observer):
    def __init__(self, command: list[str], grace: float, state_file: Path, log: Logger):
        self.command = command
        self.grace = grace
        self.state_file = state_file
        self.log = log
        self.guard: asyncio.subprocess.Process | None = None
        self._control: asyncio.WriteTransport | None = None
        self.ending: guard.Ending | None = None
        self.lost = False
        self.interrupted: int | None = None
        self.code: int | None = None
        self._view: View | None = None
        self._news = asyncio.Event()
        self._elector: Control | None = None

    # ---- the observer ---------------------------------------------------------
    async def start(self, control: Control) -> None:
        self._elector = control
        loop = asyncio.get_running_loop()
        for sig in PASSED_ON:
            loop.add_signal_handler(sig, self.on_signal, sig)
        control.spawn(self._supervise(), "lock")

    def on_state(self, view: View) -> None:
        self._view = view
        self._news.set()

    async def before_release(self) -> None:
        """The command is gone before the Lease is released, whatever stopped the elector."""
        if self.guard is None or self.guard.returncode is not None:
            return
        self._tell("STOP")
        if self.ending is not None:
            self.ending.stop(time.monotonic())
            self.ending.send(signal.SIGTERM)
        try:
            async with asyncio.timeout(self.grace + 2 * GUARD_STUCK):
                self.code = await self.guard.wait()
        except TimeoutError:
            self.guard.kill()
            if self.ending is not None:
                self.ending.send(signal.SIGKILL)
            self.code = await self.guard.wait()

    def on_signal(self, sig: int) -> None:
        """SIGTERM and friends: to the command while it runs, else a stop."""
        if self.guard is not None and self.guard.returncode is None:
            self.log.info("forwarding a signal to the command", signal=signal.Signals(sig).name)
            self._tell(f"SIG {int(sig)}")
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

    # ---- running the command --------------------------------------------------
    async def _supervise(self) -> None:
        """Start the command on leading, move its deadline, end it on loss; stop when it ends."""
        deadline = math.nan
        while True:
            now = time.monotonic()
            valid = self._view.valid_until if self._view is not None else None
            if self.guard is None:
                if valid is not None:
                    deadline = valid - KILL_MARGIN
                    await self._start(deadline)
            elif valid is not None and not self.lost and valid - KILL_MARGIN != deadline:
                deadline = valid - KILL_MARGIN
                self._tell(f"D {deadline!r}")
                if self.ending is not None:
                    self.ending.deadline = deadline
            elif valid is None and not self.lost:
                self.lost = True
                self.log.warning("leadership lost: ending the command", grace=self.grace)
                self._tell("STOP")
                if self.ending is not None:
                    self.ending.stop(now)
            elif self._guard_stuck(now):
                # The command was SIGKILLed (by us, at the latest); a guard that has not
                # reported it is frozen or stuck: it goes too.
                self.log.warning("the guard did not report the command's end; killing it")
                self.guard.kill()
            pause = self.ending.enforce(now) if self.ending is not None else math.inf
            if await self._wait(min(pause, 1.0)):
                await self._ended()
                await asyncio.Future()  # parked: the elector's shutdown cancels it

    def _guard_stuck(self, now: float) -> bool:
        if self.guard is None or self.guard.returncode is not None or self.ending is None:
            return False
        return now > min(self.ending.deadline, self.ending.stop_at) + GUARD_STUCK

    async def _wait(self, timeout: float) -> bool:
        """Until news, the command's end or ``timeout``; True when the command ended."""
        self._news.clear()
        waits: set[asyncio.Future[Any]] = {asyncio.ensure_future(self._news.wait())}
        if self.guard is not None:
            waits.add(asyncio.ensure_future(self.guard.wait()))
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        for w in waits:
            w.cancel()
        return self.guard is not None and self.guard.returncode is not None

    def _tell(self, line: str) -> None:
        """One line to the guard; buffered here while the guard does not read (frozen)."""
        if self._control is not None and not self._control.is_closing():
            self._control.write(line.encode() + b"\n")

    async def _start(self, deadline: float) -> None:
        view = self._view
        token = view.state.fencing_token if view is not None else None
        identity = view.state.identity if view is not None else ""
        env = {
            **os.environ,
            "LEADER_ELECTION_FENCING_TOKEN": str(token),
            "LEADER_ELECTION_STATE_FILE": str(self.state_file),
            "LEADER_ELECTION_IDENTITY": identity,
        }
        # Two pipes of their own: the command shares lock's stdin, stdout and stderr.
        control_r, control_w = os.pipe()
        report_r, report_w = os.pipe()
        try:
            self.guard = await asyncio.create_subprocess_exec(
                sys.executable,
                "-I",
                "-S",
                str(GUARD),
                repr(self.grace),
                repr(deadline),
                str(control_r),
                str(report_w),
                "--",
                *self.command,
                pass_fds=(control_r, report_w),
                env=env,
            )
        finally:
            os.close(control_r)
            os.close(report_w)
        loop = asyncio.get_running_loop()
        self._control, _ = await loop.connect_write_pipe(
            asyncio.Protocol, os.fdopen(control_w, "wb", buffering=0)
        )
        reader = asyncio.StreamReader()
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(report_r, "rb", buffering=0)
        )
        first = (await reader.readline()).decode().split()
        transport.close()
        pgid = int(first[1]) if first[:1] == ["PID"] and len(first) == 2 else None
        if pgid is not None:
            self.ending = guard.Ending(pgid, self.grace, deadline)
        self.log.info("leading: command started", fencing_token=token, pid=pgid)

    async def _ended(self) -> None:
        """The guard exited: note the code (or the deadline's loss), then stop the elector."""
        assert self.guard is not None
        code = await self.guard.wait()
        if self.ending is not None and time.monotonic() >= self.ending.deadline - self.grace:
            self.lost = True  # ended by the deadline (a frozen lock sees it only now)
        if code < 0 and self.ending is not None:  # the guard itself was killed
            self.ending.send(signal.SIGKILL)
            code = 1
        self.code = code
        self.log.info("command exited", code=code)
        if self._control is not None:
            self._control.close()
        if self._elector is not None:
            self._elector.stop()
