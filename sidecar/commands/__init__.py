"""The command line (``run``, ``lock``, ``status``, ``cleanup``, the door to ``injector``):
settings in, exit code out; the only package that builds and wires objects (``wiring``)."""

from __future__ import annotations

import sys

from ..core.defaults import PROG


def fail(message: str, code: int) -> int:
    """One line on stderr, then ``code`` (2: bad configuration, 1: runtime failure)."""
    print(f"{PROG}: {message}", file=sys.stderr)
    return code
