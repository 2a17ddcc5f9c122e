"""``grelmicro-sidecar lock -- CMD...``: run a command only while this process leads (contract §7).

The election is the sidecar's own driver (``runner.Sidecar``); this module only
decides when the command runs. It starts the command (through ``guard``, its
own process) once this process leads, with ``LEADER_ELECTION_FENCING_TOKEN``
and ``LEADER_ELECTION_STATE_FILE`` in its environment, and passes every new
``valid_until`` to the guard as a deadline on the shared monotonic clock.

Guarantees ("the tree": the command and every process it started, found by
parent chain; the guard and this process are both subreapers, so no orphan
leaves it):

- no process of the tree outlives the leadership it was started under: each
  gets SIGTERM a grace period before ``valid_until`` (or as soon as leadership
  is seen lost) and SIGKILL at ``valid_until``. Both the guard and this process
  enforce the deadline, so freezing or killing either one does not extend it;
  a guard that is killed leaves the tree to this process, which kills it;
- when the command exits, what it left behind is ended too (the guard's
  SIGTERM, SIGKILL a grace later); the Lease is released only once nothing of
  the tree is left (or ``valid_until`` has passed: no process of it can run
  then), and ``lock`` exits with the command's code (128 + n for a signal);
  when leadership was lost under it, ``lock`` exits 75 (EX_TEMPFAIL: run it
  again to take part again);
- a guard that has not reported the command's start ``REPORT_TIMEOUT`` after
  it was started is killed with whatever it started, and ``lock`` exits 126,
  as for a command that could not be started;
- orphans that re-parent to this process (the tree of a killed guard; every
  orphan of the container when ``lock`` is its PID 1) are reaped, the guard's
  exit status left to asyncio's child watcher;
- SIGTERM, SIGINT, SIGHUP, SIGUSR1 and SIGUSR2 are forwarded to the command
  while it runs (it decides when to exit, and the Lease is held until it does);
  before it runs, SIGTERM or SIGINT ends ``lock`` at once, 128 + n.
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
from .elector import Sidecar

#: leadership was lost while the command ran (EX_TEMPFAIL)
LOST_EXIT = 75
#: the command is killed this long before ``valid_until``, not at it
KILL_MARGIN = 0.1
#: a guard that has not reported the command's end this long after its SIGKILL is killed
GUARD_STUCK = 1.0
#: a guard that has not reported the command's start this long after it was started is killed
REPORT_TIMEOUT = 2.0
#: the command could not be started (the guard's code for a command it cannot execute)
NOT_STARTED_EXIT = 126
#: how often this process sends SIGKILL again to the tree, once the kill time has passed
KILL_AGAIN = 0.1
#: Passed on to the command and nothing else (SIGTERM and SIGINT also stop ``lock`` when
#: no command runs; the driver's ``on_signal`` hook gives them to ``_on_signal``).
PASSED_ON = (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
GUARD = Path(guard.__file__)


class Lock:
    def __init__(self, sidecar: Sidecar, command: list[str], grace: float, log: Logger):
        self.sidecar = sidecar
        self.command = command
        self.grace = grace
        self.log = log
        self.guard: asyncio.subprocess.Process | None = None
        self._control: asyncio.WriteTransport | None = None
        self.ending: guard.Ending | None = None
        self.lost = False
        self.not_started = False
        self.interrupted: int | None = None
        self._report_fd: int | None = None
        self._report_buf = b""
        self._report_due = math.inf
        self._fencing_token: int | None = None
        sidecar.on_signal = self._on_signal

    def _on_signal(self, sig: int) -> None:
        if self.guard is not None and self.guard.returncode is None:
            self.log.info("forwarding a signal to the command", signal=signal.Signals(sig).name)
            self._tell(f"SIG {int(sig)}")
        elif sig in (signal.SIGTERM, signal.SIGINT):
            self.interrupted = sig
            self.sidecar.request_stop()

    def _tell(self, line: str) -> None:
        """One line to the guard; buffered here while the guard does not read (frozen)."""
        if self._control is not None and not self._control.is_closing():
            self._control.write(line.encode() + b"\n")

    async def run(self) -> int:
        """Take part in the election and run the command while leading; the exit code."""
        loop = asyncio.get_running_loop()
        for sig in PASSED_ON:
            loop.add_signal_handler(sig, self._on_signal, sig)
        self._adopt_orphans(loop)
        election = self.sidecar.election
        runner = asyncio.create_task(self.sidecar.run(), name="election driver")
        deadline = math.nan
        while True:
            now = time.monotonic()
            valid = election.valid_until(now) if election.is_leader(now) else None
            if self.guard is None:
                if runner.done():
                    break
                if valid is not None:
                    deadline = valid - KILL_MARGIN
                    await self._start(deadline)
            elif valid is not None and not self.lost and valid - KILL_MARGIN != deadline:
                deadline = valid - KILL_MARGIN
                self._tell(f"D {deadline!r}")
                assert self.ending is not None
                self.ending.deadline = deadline
            elif valid is None and not self.lost:
                self.lost = True
                self.log.warning("leadership lost: ending the command", grace=self.grace)
                self._tell("STOP")
                assert self.ending is not None
                self.ending.stop(now)
            elif self._guard_stuck(now):
                # The command was SIGKILLed (by us, at the latest); a guard that has not
                # reported it is frozen or stuck: it goes too.
                self.log.warning("the guard did not report the command's end; killing it")
                self.guard.kill()
            if self._report_overdue(now):
                self._end_silent_guard()
            pause = self.ending.enforce(now) if self.ending is not None else math.inf
            pause = min(pause, max(0.0, self._report_due - now))
            if await self._wait(runner, min(pause, 1.0)):
                break
        return await self._finish(runner)

    def _adopt_orphans(self, loop: asyncio.AbstractEventLoop) -> None:
        """Be the subreaper of the guard's tree (it re-parents here if the guard dies), and
        reap what re-parents here (as PID 1: every orphan of the container) on SIGCHLD."""
        if not guard.become_subreaper():
            self.log.warning("cannot become a subreaper: a killed guard's tree would escape")
        loop.add_signal_handler(signal.SIGCHLD, self._reap_orphans)

    def _reap_orphans(self) -> None:
        """Reap the zombie children that are not the guard (asyncio waits for that one)."""
        running = self.guard is not None and self.guard.returncode is None
        guard.reap_orphans(keep=self.guard.pid if running and self.guard else None)

    def _report_overdue(self, now: float) -> bool:
        running = self.guard is not None and self.guard.returncode is None
        if not running or now < self._report_due:
            return False
        # This process may have been frozen or busy (a state file's fsync) with the
        # report already in the pipe: read it now, before judging the guard silent.
        self._read_report()
        return now >= self._report_due

    def _end_silent_guard(self) -> None:
        """The guard never said the command started: kill it and whatever it started."""
        assert self.guard is not None and self.ending is not None
        self.log.warning(
            "the guard did not report the command's start; killing it and what it started",
            timeout=REPORT_TIMEOUT,
        )
        self.not_started = True
        self._report_due = math.inf
        self.guard.kill()
        self.ending.kill()

    def _guard_stuck(self, now: float) -> bool:
        if self.guard is None or self.guard.returncode is not None or self.ending is None:
            return False
        return now > self.ending.kill_at() + GUARD_STUCK

    async def _wait(self, runner: asyncio.Task[int], timeout: float) -> bool:
        """Until the state changes, the command ends or ``timeout``; True when the command ended."""
        changed = asyncio.ensure_future(
            self.sidecar.changes.wait(self.sidecar.changes.version, timeout)
        )
        waits: set[asyncio.Future[Any]] = {changed}
        if not runner.done():
            waits.add(runner)
        if self.guard is not None:
            waits.add(asyncio.ensure_future(self.guard.wait()))
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for w in waits:
            if w is not runner and not w.done():
                w.cancel()
        return self.guard is not None and self.guard.returncode is not None

    async def _start(self, deadline: float) -> None:
        state = self.sidecar.snapshot()
        env = {
            **os.environ,
            "LEADER_ELECTION_FENCING_TOKEN": str(state.fencing_token),
            "LEADER_ELECTION_STATE_FILE": str(self.sidecar.state_file.path),
            "LEADER_ELECTION_IDENTITY": state.identity,
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
        # Its tree, for when the guard is frozen or killed: all this process's
        # descendants (the guard's, and what re-parents here), the guard spared.
        self.ending = guard.Ending(
            os.getpid(), self.grace, deadline, spare=frozenset({self.guard.pid}), again=KILL_AGAIN
        )
        loop = asyncio.get_running_loop()
        self._control, _ = await loop.connect_write_pipe(
            asyncio.Protocol, os.fdopen(control_w, "wb", buffering=0)
        )
        self._report_due = time.monotonic() + REPORT_TIMEOUT
        self._fencing_token = state.fencing_token
        self._report_fd = report_r
        os.set_blocking(report_r, False)
        loop.add_reader(report_r, self._read_report)

    def _read_report(self) -> None:
        """Read what the guard reported so far (never blocks): on ``PID <n>`` the command
        has started; at EOF without it (the guard ended first), ``_report_due`` holds."""
        if self._report_fd is None:
            return
        try:
            chunk = os.read(self._report_fd, 256)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        self._report_buf += chunk
        line, newline, _ = self._report_buf.partition(b"\n")
        if not newline and chunk:
            return
        self._close_report()
        words = line.decode(errors="replace").split()
        if newline and words[:1] == ["PID"] and len(words) == 2:
            self._report_due = math.inf
            self.log.info(
                "leading: command started", fencing_token=self._fencing_token, pid=words[1]
            )

    def _close_report(self) -> None:
        if self._report_fd is not None:
            asyncio.get_running_loop().remove_reader(self._report_fd)
            os.close(self._report_fd)
            self._report_fd = None

    async def _finish(self, runner: asyncio.Task[int]) -> int:
        """Release (the command is gone) and choose the exit code."""
        code: int | None = None
        if self.guard is not None:
            if self.guard.returncode is None:  # the driver ended first (a bug): end the command
                self._tell("STOP")
                if self.ending is not None:
                    self.ending.stop(time.monotonic())
                    self.ending.terminate()
            code = await self.guard.wait()
            self._close_report()
            if self.ending is not None and time.monotonic() >= self.ending.deadline - self.grace:
                self.lost = True  # ended by the deadline (a frozen lock sees it only now)
            if code < 0 and self.ending is not None:  # the guard itself was killed
                self.ending.spare = frozenset()
                self.ending.kill()
                code = 1
            if self.not_started:
                code = NOT_STARTED_EXIT
            await self._until_the_tree_is_gone()
            self.log.info("command exited", code=code)
            if self._control is not None:
                self._control.close()
        self.sidecar.request_stop()
        asyncio.get_running_loop().remove_signal_handler(signal.SIGCHLD)
        driver = await runner
        if self.lost:
            return LOST_EXIT
        if code is not None:
            return code
        if self.interrupted is not None:
            return 128 + self.interrupted
        return driver

    async def _until_the_tree_is_gone(self) -> None:
        """Until no process of the tree is left, SIGKILL again and reap what re-parents here;
        given up at ``valid_until`` (the release cannot make anything run sooner then).

        A guard that exited on its own left nothing (it waits for its whole tree);
        one that was killed left its tree to this process.
        """
        ending = self.ending
        if ending is None:
            return
        ending.spare = frozenset()
        valid_until = ending.deadline + KILL_MARGIN
        while True:
            guard.reap_orphans(keep=None)
            left = guard.alive(os.getpid())
            if not left:
                return
            if time.monotonic() >= valid_until:
                self.log.warning("processes of the command still run at valid_until", pids=left)
                return
            ending.kill()
            await asyncio.sleep(KILL_AGAIN)
