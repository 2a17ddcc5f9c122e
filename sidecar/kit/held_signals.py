"""Termination signals that arrive before the driver's loop can handle them.

A SIGTERM to a container that has just started would end ``run`` mid-import with 143, not
contract §5's 0: ``hold`` (the first thing ``run`` does) keeps it for the driver to replay
once its handlers are installed, as the ordinary graceful shutdown.
"""

from __future__ import annotations

import signal

_held: list[int] = []


def hold() -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda sig, _frame: _held.append(sig))


def take() -> list[int]:
    """The signals held so far, oldest first; each is returned once."""
    taken, _held[:] = _held[:], []
    return taken
