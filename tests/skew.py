"""A process whose wall clock runs ahead or behind, its monotonic clock untouched.

libfaketime (Debian's ``libfaketime``) is preloaded with
``FAKETIME_DONT_FAKE_MONOTONIC=1``: ``time.time()`` and ``datetime.now()``
move, ``time.monotonic()`` does not, as on a node whose clock is off.
Test support only; installs the package with apt when it is missing.
"""

from __future__ import annotations

from tests.cluster.host import ensure_packages

LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


def skewed_clock(seconds: int) -> dict[str, str]:
    """The environment of a process whose wall clock is ``seconds`` off (+ ahead, - behind)."""
    ensure_packages({"libfaketime": LIBFAKETIME})
    return {
        "LD_PRELOAD": LIBFAKETIME,
        "FAKETIME": f"{seconds:+d}s",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }
