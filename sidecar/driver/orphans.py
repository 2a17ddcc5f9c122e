"""What is left of ``lock``'s own descendants: the processes that still run, and the zombies to reap.

``lock`` is a subreaper: a killed guard's tree, and every orphan of the
container when ``lock`` is its PID 1, re-parent to it. Guarantee:
``reap_orphans`` never reaps the guard, whose status belongs to its own waiter.
The /proc reading is ``guard``'s, which both use: the guard runs as a script
(``python -I -S``, the standard library only) and can import no module here.
"""

from __future__ import annotations

import contextlib
import os

from .guard import DEAD, descendants, processes


def alive(root: int, spare: frozenset[int] = frozenset()) -> list[int]:
    """The descendants of ``root`` that still run (a thread of theirs has not exited), but ``spare``."""
    return [
        p for p, (state, _) in descendants(root).items() if state not in DEAD and p not in spare
    ]


def reap_orphans(keep: int | None) -> list[int]:
    """Reap this process's zombie children but ``keep``, each by its own PID; those reaped.

    Found in /proc, never by ``wait(-1)``: the status of ``keep`` (``lock``'s
    guard) is left to the one waiting for it (asyncio's child watcher).
    """
    me = os.getpid()
    reaped = []
    for pid, (ppid, state, _) in processes().items():
        if ppid == me and state == "Z" and pid != keep:
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    reaped.append(pid)
    return reaped
