"""Termination signals that arrive before the driver's loop can handle them.

The kubelet may send SIGTERM to a container that has only just started. With
Python's default disposition that kills ``run`` while it is still importing,
and it exits 143 instead of contract §5's 0. ``hold`` (the first thing ``run``
does) remembers such a signal instead; the driver replays what was held as soon
as its own handlers are installed, so the shutdown is the ordinary graceful one
(nothing is held yet, so it is quick).
"""

from __future__ import annotations

import signal
from types import FrameType

_held: list[int] = []


def hold() -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _remember)


def _remember(sig: int, _frame: FrameType | None) -> None:
    _held.append(sig)


def take() -> list[int]:
    """The signals held so far, oldest first; each is returned once."""
    taken = list(_held)
    _held.clear()
    return taken
