"""Termination signals that arrive before the driver's loop can handle them.

The kubelet may SIGTERM a container that has only just started: by default that
kills ``run`` mid-import with 143 instead of contract §5's 0. ``hold`` (the first
thing ``run`` does) remembers such a signal instead; the driver replays what was
held once its own handlers are installed: the ordinary graceful shutdown.
"""

from __future__ import annotations

import signal

_held: list[int] = []


def hold() -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda sig, _frame: _held.append(sig))


def take() -> list[int]:
    """The signals held so far, oldest first; each is returned once."""
    taken = _held[:]
    _held.clear()
    return taken
