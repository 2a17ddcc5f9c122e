"""The command line (``run``, ``lock``, ``status``, ``cleanup``, ``transfer``, the door to ``injector``):
settings in, exit code out; the only package that builds and wires objects (``wiring``)."""

from __future__ import annotations

import os
import signal
import sys

from ..core.defaults import PROG

_held: list[int] = []


def main(argv: list[str] | None = None) -> int:
    """The console script: a SIGTERM while ``run`` or ``lock`` is still importing would end it
    with 143, not contract §5's 0, so it is held first, for ``run`` to replay once its
    handlers are installed (``take_held``), as the ordinary graceful shutdown."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["run"], ["lock"]):
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda sig, _frame: _held.append(sig))
    from .cli import command

    code = command(argv, os.environ)
    if argv[:1] in (["run"], ["lock"]):
        # All is done (state published, Lease released, logs written): skip the interpreter's
        # teardown, CPU that every stopping pod of a node drain pays at the same moment.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def fail(message: str, code: int) -> int:
    """One line on stderr, then ``code`` (2: bad configuration, 1: runtime failure)."""
    print(f"{PROG}: {message}", file=sys.stderr)
    return code


def take_held() -> list[int]:
    """The signals held so far, oldest first; each is returned once."""
    taken, _held[:] = _held[:], []
    return taken
