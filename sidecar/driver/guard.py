"""The guard of ``lock``: runs the command and ends it, and everything it started, by a deadline.

Run by ``lock`` as its own process (``python -I -S guard.py GRACE DEADLINE CONTROL REPORT
-- CMD...``, standard library only, so it starts in milliseconds), it makes itself a
child subreaper, starts the command in a new session and process group with
``lock``'s stdin, stdout and stderr, and reads lines from ``lock`` on CONTROL:
``D <t>`` (the command may run until monotonic time ``t``, the leadership's
``valid_until`` on the host's shared CLOCK_MONOTONIC), ``STOP`` (leadership is
gone) and ``SIG <n>`` (a signal ``lock`` forwards to the command's group).

"The tree" is the command and every process descended from it, found by parent
chain in /proc: as a subreaper the guard adopts every orphan of the tree, even
one that called setsid. Guarantees (contract §7):

- every process of the tree gets SIGTERM (then SIGCONT) ``GRACE`` seconds before
  the deadline, at STOP, or when the command itself exits, and SIGKILL at the
  deadline (or ``GRACE`` after STOP or the exit), sent again until nothing is
  left; a frozen or killed ``lock`` sends no new deadline, so the last one holds;
- the guard exits only once nothing of the tree is left, with the command's
  exit code (128 + n for a signal; 127 or 126 when it could not be started),
  and writes ``PID <n>`` to REPORT once the command started (``lock`` kills a
  guard that stays silent);
- a guard that gets to run only after its deadline never starts the command
  (exit ``LATE_EXIT``).

The helpers at the end are ``lock``'s too (with ``orphans``), for the same tree
when the guard is the process that is frozen or killed.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import signal
import subprocess
import sys
import time

TICK = 0.02  # how often the tree's exits and the deadline are checked
#: a signal goes to the tree in rounds until a round finds no process it had not signalled
#: (a process forked while the previous round ran); at most this many rounds a call
ROUNDS = 8
PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>
#: the guard got to run only after its deadline, and did not start the command (``lock``'s
#: "leadership lost", EX_TEMPFAIL)
LATE_EXIT = 75
DEAD = ("Z", "X")  # the /proc states of a thread (a process: of all its threads) that has exited


class Ending:
    """When the tree under ``root`` gets SIGTERM and SIGKILL.

    SIGTERM (and SIGCONT) once, ``grace`` seconds before the kill time; SIGKILL at
    it and at every later ``enforce``. The kill time is the deadline, or ``grace``
    after a stop, whichever is earlier. ``group``: the command's process group,
    signalled as a whole (atomic against forks) until ``leader_reaped``; after,
    the number could name another group, and its members are found in the tree.
    ``spare``: processes of the tree that are not to be signalled (``lock``
    spares its guard). ``again``: how soon ``enforce`` is due again once SIGKILL
    was sent. ``lock`` keeps one too, for when the guard is the process that is
    frozen or killed.
    """

    def __init__(
        self,
        root: int,
        grace: float,
        deadline: float,
        group: int | None = None,
        spare: frozenset[int] = frozenset(),
        again: float = TICK,
    ):
        self.root, self.grace, self.deadline = root, grace, deadline
        self.group, self.spare, self.again = group, spare, again
        self.leader_reaped = group is None
        self.stop_at = math.inf
        self.terminated = False

    def stop(self, now: float) -> None:
        self.stop_at = min(self.stop_at, now + self.grace)

    def kill_at(self) -> float:
        return min(self.deadline, self.stop_at)

    def enforce(self, now: float) -> float:
        """Send what is due at ``now``; seconds until the next signal is due (inf: none)."""
        kill_at = self.kill_at()
        if now >= kill_at - self.grace:
            self.terminate()
        if now >= kill_at:
            self.kill()
            return self.again  # SIGKILL again, for what forked meanwhile, until none is left
        due = kill_at if self.terminated else kill_at - self.grace
        return max(0.0, due - now)

    def terminate(self) -> None:
        """SIGTERM, then SIGCONT, to every process of the tree; once."""
        if not self.terminated:
            self.terminated = True
            signalled = self._signal(signal.SIGTERM)
            self._signal(signal.SIGCONT, signalled)

    def kill(self) -> None:
        """SIGKILL to every process of the tree, now."""
        self._signal(signal.SIGKILL)

    def forward(self, sig: int) -> None:
        """``sig`` to the command's process group (what is left of it once its leader is reaped)."""
        if self.group is None:
            return
        if not self.leader_reaped:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.group, sig)
            return
        for pid, (state, group) in descendants(self.root).items():
            if group == self.group and state not in DEAD:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)

    def _signal(self, sig: int, only: set[int] | None = None) -> set[int]:
        """``sig`` to the tree in rounds (``only``: to those PIDs of it); the PIDs signalled."""
        whole = self.group if not self.leader_reaped else None
        done: set[int] = set()
        if whole is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(whole, sig)
        for _ in range(ROUNDS):
            new = [
                pid
                for pid, (state, group) in descendants(self.root).items()
                if pid not in done
                and pid not in self.spare
                and (only is None or pid in only)
                and group != whole  # the group was signalled as a whole
                and state not in DEAD
            ]
            if not new:
                break
            for pid in new:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            done.update(new)
        return done


def main(argv: list[str]) -> int:
    grace, deadline = float(argv[0]), float(argv[1])
    control, report = int(argv[2]), int(argv[3])
    command = argv[5:] if argv[4:5] == ["--"] else argv[4:]
    if not become_subreaper():
        print("grelmicro-sidecar lock: cannot become a subreaper: orphans escape", file=sys.stderr)
    if time.monotonic() >= deadline:
        # Starved past the leadership it was started for (a loaded node): too late to
        # start anything; a successor may lead already.
        return LATE_EXIT
    try:
        # close_fds (the default): the command gets stdin, stdout and stderr only.
        proc = subprocess.Popen(command, start_new_session=True)
    except OSError as err:
        print(f"grelmicro-sidecar lock: cannot run {command[0]}: {err.strerror}", file=sys.stderr)
        return 127 if isinstance(err, FileNotFoundError) else 126
    # Not before the command starts: it would inherit the ignored dispositions. A
    # terminal's ^C and a SIGTERM to lock's group reach lock, which forwards them.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # lock may already be dead (SIGKILL): then nobody reads this, and the guard
    # must go on guarding, not die of a broken pipe and leave the command unbounded.
    with contextlib.suppress(OSError):
        os.write(report, f"PID {proc.pid}\n".encode())
    os.close(report)
    return watch(proc, Ending(os.getpid(), grace, deadline, group=proc.pid), control)


def watch(proc: subprocess.Popen[bytes], ending: Ending, control: int) -> int:
    """Until nothing of the tree is left: the command's exit code."""
    code: int | None = None
    pending, reading = b"", True
    while True:
        ended, left = reap_children()
        if proc.pid in ended:
            code = proc.returncode = ended[proc.pid]
            ending.leader_reaped = True
            ending.stop(time.monotonic())  # what it left behind goes too
        if not left:
            assert code is not None  # the command was a child until reaped
            return code
        ending.enforce(time.monotonic())
        if not reading:
            time.sleep(TICK)
            continue
        ready, _, _ = select.select([control], [], [], TICK)
        if not ready:
            continue
        chunk = os.read(control, 4096)
        if not chunk:  # lock is gone: no new deadline will come
            reading = False
            continue
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            word, _, value = line.decode().partition(" ")
            if word == "D":
                ending.deadline = float(value)
            elif word == "STOP":
                ending.stop(time.monotonic())
                ending.terminate()
            elif word == "SIG":
                ending.forward(int(value))


def reap_children() -> tuple[dict[int, int], bool]:
    """Reap every child that has exited: ({PID: exit code}, whether any child is left).

    Only for a process whose children are all its own to reap (the guard: no
    other waiter). No child left means no descendant left, for a subreaper.
    """
    ended: dict[int, int] = {}
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return ended, False
        if pid == 0:
            return ended, True
        code = os.waitstatus_to_exitcode(status)
        ended[pid] = code if code >= 0 else 128 - code


# ---- the tree, for the guard and for lock -----------------------------------------------


def become_subreaper() -> bool:
    """Make this process adopt its descendants' orphans (Linux 3.4+); False where it cannot."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def processes() -> dict[int, tuple[int, str, int]]:
    """Every process /proc shows: PID -> (parent PID, state letter, process group).

    The state is ``Z`` only once every thread has exited: /proc/PID/stat is the
    main thread's, ``Z`` from its ``pthread_exit`` on while the others run (issue 38).
    """
    table: dict[int, tuple[int, str, int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses
            state, ppid, pgrp = stat[stat.rindex(b")") + 2 :].split()[:3]
            if state.decode() in DEAD:
                state = _live_thread_state(name) or state
            table[int(name)] = (int(ppid), state.decode(), int(pgrp))
        except (OSError, ValueError):
            continue  # gone meanwhile
    return table


def _live_thread_state(pid: str) -> bytes:
    """The state of a thread of ``pid`` that has not exited; empty when none is left."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        with (
            contextlib.suppress(OSError, IndexError),
            open(f"/proc/{pid}/task/{tid}/stat", "rb") as f,
        ):
            state = f.read().rpartition(b")")[2].split()[0]
            if state.decode() not in DEAD:
                return state
    return b""


def descendants(root: int) -> dict[int, tuple[str, int]]:
    """The processes whose parent chain leads to ``root``: PID -> (state, process group)."""
    table = processes()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found: dict[int, tuple[str, int]] = {}
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found[child] = table[child][1:]
                todo.append(child)
    return found


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
