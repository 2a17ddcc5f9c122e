"""The command line (``run``, ``lock``, ``status``, ``cleanup``, the door to ``injector``):
settings in, exit code out; the only package that builds and wires objects (``wiring``)."""

from __future__ import annotations

import os
import sys

from ..core.defaults import PROG
from ..kit import held_signals


def main(argv: list[str] | None = None) -> int:
    """The console script: a SIGTERM while ``run`` or ``lock`` is still importing is held
    (it becomes the graceful exit of contract §5, not Python's 143), so hold first."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["run"], ["lock"]):
        held_signals.hold()
    from .cli import command

    return command(argv, os.environ)


def fail(message: str, code: int) -> int:
    """One line on stderr, then ``code`` (2: bad configuration, 1: runtime failure)."""
    print(f"{PROG}: {message}", file=sys.stderr)
    return code
