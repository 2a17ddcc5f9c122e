"""The guard of ``lock``: runs the command and ends it by a deadline, even if ``lock`` cannot.

Run by ``lock`` as its own process (``python -I -S guard.py GRACE DEADLINE CONTROL REPORT
-- CMD...``, standard library only, so it starts in milliseconds), it starts the
command in a new process group with ``lock``'s own stdin, stdout and stderr (a
container's log gets the command's output), and reads lines from ``lock`` on the
pipe whose descriptor is CONTROL:

- ``D <t>``: the command may run until monotonic time ``t`` (the leadership's
  ``valid_until`` on CLOCK_MONOTONIC, which every process of the host shares);
- ``STOP``: leadership is gone: end the command now;
- ``SIG <n>``: send signal ``n`` to the command (``lock`` forwards its signals).

Guarantees: the command's process group gets SIGTERM ``GRACE`` seconds before
the deadline (or at STOP) and SIGKILL at the deadline (or ``GRACE`` after STOP),
whichever comes first. A ``lock`` that is frozen (SIGSTOP) or killed sends no
new deadline, so the last one holds: the command is gone before the leadership
it ran under lapses. The guard's own exit code is the command's (128 + n when a
signal ended it), and it writes ``PID <n>`` to the pipe REPORT first so that
``lock`` can end the process group itself should the guard be the one frozen.
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

TICK = 0.02  # how often the command's exit and the deadline are checked


class Ending:
    """When the command's process group gets SIGTERM and SIGKILL; each is sent once.

    SIGTERM ``grace`` seconds before the kill time, SIGKILL at it; the kill time
    is the deadline, or ``grace`` after a stop, whichever is earlier. ``lock``
    keeps one too, for when the guard is the process that is frozen.
    """

    def __init__(self, pgid: int, grace: float, deadline: float):
        self.pgid, self.grace, self.deadline = pgid, grace, deadline
        self.stop_at = math.inf
        self.sent: set[int] = set()

    def stop(self, now: float) -> None:
        self.stop_at = min(self.stop_at, now + self.grace)

    def enforce(self, now: float) -> float:
        """Send what is due at ``now``; seconds until the next signal is due (inf: none)."""
        kill_at = min(self.deadline, self.stop_at)
        if now >= kill_at - self.grace:
            self.send(signal.SIGTERM)
        if now >= kill_at:
            self.send(signal.SIGKILL)
            return math.inf
        due = kill_at if signal.SIGTERM in self.sent else kill_at - self.grace
        return max(0.0, due - now)

    def send(self, sig: int, once: bool = True) -> None:
        if once and sig in self.sent:
            return
        self.sent.add(sig)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pgid, sig)


def main(argv: list[str]) -> int:
    grace, deadline = float(argv[0]), float(argv[1])
    control, report = int(argv[2]), int(argv[3])
    command = argv[5:] if argv[4:5] == ["--"] else argv[4:]
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
    ending = Ending(proc.pid, grace, deadline)
    pending = b""
    reading = True
    while True:
        code = proc.poll()
        if code is not None:
            return code if code >= 0 else 128 - code
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
                ending.send(signal.SIGTERM)
            elif word == "SIG":
                ending.send(int(value), once=False)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
