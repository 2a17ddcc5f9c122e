"""The command of ``lock``, run through its guard: started, given deadlines, ended with its whole tree.

``lock`` (the observer) decides when; this module does it. "The tree" is the
command and every process it started (``guard``): the guard ends it by each
deadline, and this process keeps an ``Ending`` of its own over all its
descendants but the guard, so that a frozen or killed guard cannot extend
any of it. This process is a subreaper too, so a killed guard's tree
re-parents here and is ended here. Guarantees (contract §7):

- a guard that has not reported the command's start ``REPORT_TIMEOUT`` after
  it was started is killed with whatever it started (``not_started``: ``lock``
  exits 126, as for a command that could not be started);
- ``ended`` returns only once nothing of the tree is left, or ``valid_until``
  has passed (SIGKILL went out at ``valid_until - KILL_MARGIN``); then
  ``outlived`` says whether something of it still runs (stuck in the kernel);
- orphans that re-parent here (every orphan of the container when ``lock`` is
  its PID 1) are reaped, the guard's own status left to asyncio.
"""

from __future__ import annotations

import asyncio
import math
import os
import signal
import sys
import time
from pathlib import Path

from ..kit.logs import Logger
from . import guard, orphans

#: the command is killed this long before ``valid_until``, not at it
KILL_MARGIN = 0.1
#: a guard that has not reported the command's start this long after it was started is killed
REPORT_TIMEOUT = 2.0
#: the command could not be started (the guard's code for a command it cannot execute)
NOT_STARTED_EXIT = 126
#: how often this process sends SIGKILL again to the tree, once the kill time has passed
KILL_AGAIN = 0.1
GUARD = Path(guard.__file__)


class Command:
    def __init__(self, argv: list[str], grace: float, log: Logger):
        self.argv, self.grace, self.log = argv, grace, log
        self.guard: asyncio.subprocess.Process | None = None
        self.ending: guard.Ending | None = None
        self.not_started, self.report_due, self._report_buf = False, math.inf, b""
        self.started = False  # the guard reported the command's start
        #: What of the tree still ran when ``ended`` gave up on it at ``valid_until``.
        self._left: list[int] = []
        self._control: asyncio.WriteTransport | None = None
        self._report_fd: int | None = None
        self._token: int | None = None

    @property
    def running(self) -> bool:
        return self.guard is not None and self.guard.returncode is None

    @property
    def outlived(self) -> bool:
        """Whether a process of the tree outlived its SIGKILLs past ``valid_until`` and still runs."""
        return bool(self._left) and bool(orphans.alive(os.getpid()))

    def adopt_orphans(self, loop: asyncio.AbstractEventLoop) -> None:
        """Be the subreaper of the guard's tree, and reap what re-parents here on SIGCHLD."""
        if not guard.become_subreaper():
            self.log.warning("cannot become a subreaper: a killed guard's tree would escape")
        loop.add_signal_handler(signal.SIGCHLD, self._reap_orphans)

    def _reap_orphans(self) -> None:
        orphans.reap_orphans(keep=self.guard.pid if self.running and self.guard else None)

    async def start(self, deadline: float, env: dict[str, str], token: int | None) -> None:
        """Start the guard, and through it the command, allowed to run until ``deadline``."""
        # Two pipes of their own: the command shares lock's stdin, stdout and stderr.
        control_r, control_w = os.pipe()
        report_r, report_w = os.pipe()
        argv = [sys.executable, "-I", "-S", str(GUARD), repr(self.grace), repr(deadline)]
        argv += [str(control_r), str(report_w), "--", *self.argv]
        try:
            self.guard = await asyncio.create_subprocess_exec(
                *argv, pass_fds=(control_r, report_w), env={**os.environ, **env}
            )
        finally:
            os.close(control_r)
            os.close(report_w)
        # Its tree, for when the guard is frozen or killed: all of this process's
        # descendants (the guard's, and what re-parents here), the guard spared.
        spare = frozenset({self.guard.pid})
        self.ending = guard.Ending(os.getpid(), self.grace, deadline, spare=spare, again=KILL_AGAIN)
        loop = asyncio.get_running_loop()
        self._control, _ = await loop.connect_write_pipe(
            asyncio.Protocol, os.fdopen(control_w, "wb", buffering=0)
        )
        self.report_due, self._token = time.monotonic() + REPORT_TIMEOUT, token
        self._report_fd = report_r
        os.set_blocking(report_r, False)
        loop.add_reader(report_r, self._read_report)

    def tell(self, line: str) -> None:
        """One line to the guard; buffered here while the guard does not read (frozen)."""
        if self._control is not None and not self._control.is_closing():
            self._control.write(line.encode() + b"\n")

    def stop(self, now: float) -> None:
        """Leadership is gone: the guard and this process both end the tree within the grace."""
        self.tell("STOP")
        if self.ending is not None:
            self.ending.stop(now)

    def kill_guard(self) -> None:
        """SIGKILL the tree, then the guard: never the other way round, or a ``lock`` killed
        (or starved) in between would leave the tree with nobody to end it."""
        if self.ending is not None:
            self.ending.kill()
        if self.guard is not None and self.running:
            self.guard.kill()

    def check_report(self, now: float) -> None:
        """Kill a guard that has not reported the command's start in time, and its tree."""
        if not self.running or now < self.report_due:
            return
        # This process may have been frozen or busy with the report already in the
        # pipe: read it now, before judging the guard silent.
        self._read_report()
        if now < self.report_due or self.guard is None or self.ending is None:
            return
        self.log.warning(
            "the guard did not report the command's start; killing it and what it started",
            timeout=REPORT_TIMEOUT,
        )
        self.not_started, self.report_due = True, math.inf
        self.kill_guard()

    def _read_report(self) -> None:
        """What the guard reported so far (never blocks): ``PID <n>`` once the command started."""
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
            self.report_due, self.started = math.inf, True
            self.log.info("leading: command started", fencing_token=self._token, pid=words[1])

    def _close_report(self) -> None:
        if self._report_fd is not None:
            asyncio.get_running_loop().remove_reader(self._report_fd)
            os.close(self._report_fd)
            self._report_fd = None

    async def ended(self) -> int:
        """Once the guard exited and nothing of the tree is left: the exit code for ``lock``."""
        assert self.guard is not None
        code = await self.guard.wait()
        self._close_report()
        if code < 0 and self.ending is not None:  # the guard itself was killed
            self.ending.spare = frozenset()
            self.ending.kill()
            code = 1
        if self.not_started:
            code = NOT_STARTED_EXIT
        await self._until_the_tree_is_gone()
        if code == guard.LATE_EXIT and not self.started:
            self.log.warning("the guard ran only after the leadership ended; command not started")
        else:
            self.log.info("command exited", code=code)
        if self._control is not None:
            self._control.close()
        return code

    async def _until_the_tree_is_gone(self) -> None:
        """SIGKILL again and reap until no process of the tree is left; given up at ``valid_until``.

        A guard that exited on its own left nothing (it waits for its whole tree);
        one that was killed left its tree to this process.
        """
        ending = self.ending
        if ending is None:
            return
        ending.spare = frozenset()
        valid_until = ending.deadline + KILL_MARGIN
        while True:
            orphans.reap_orphans(keep=None)
            left = orphans.alive(os.getpid())
            if not left:
                return
            if time.monotonic() >= valid_until:
                self.log.warning("processes of the command still run at valid_until", pids=left)
                self._left = left
                return
            ending.kill()
            await asyncio.sleep(KILL_AGAIN)
