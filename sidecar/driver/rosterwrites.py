"""Writes of the roster and of the marks: over the version read, retried through 409s and outages.

Each try writes over the version it read: in a mass start, hundreds of
writers of one object take turns through 409s, where patches without a
version made the API server retry each on every conflict until they timed
out (504) and were sent again. A 409 is tried again soon (the server answers,
and one of the writers went through), an API server that did not answer, or
a 5xx or 429, later; both with full jitter, so the writers spread out instead
of coming back in waves. Anything else is given up, with one warning that
says what it costs: none of these writes decides who leads.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Literal

from ..core import backoff
from ..kit.logs import Logger
from ..kube.errors import ApiError, ApiUnavailable, Conflict

#: A write that met another (409) is tried again after up to this, doubling to ``RETRY_MAX``.
CONFLICT_FIRST = 0.5
#: A write the API server did not answer is tried again after up to this, doubling too.
RETRY_FIRST, RETRY_MAX = 2.0, 120.0
#: The share of each wait drawn at random.
JITTER = (0.1, 1.0)

What = Literal["join", "mark"]
COST: dict[What, str] = {
    "join": "handovers will not name this pod (it still takes over as any follower does)",
    "mark": "a candidate that finds its Lease absent waits a lease duration",
}


async def written(
    what: What, where: str, write: Callable[[bool], Awaitable[None]], log: Logger
) -> bool:
    """``write(retry)`` until it returns (True) or is refused for good (False; ``where``:
    the Lease)."""
    failures = {"conflict": 0, "unavailable": 0}
    retry = False
    while True:
        try:
            await write(retry)
            return True
        except Conflict:
            why, first = "conflict", CONFLICT_FIRST
        except ApiError as err:
            _refused(what, where, err, log)
            if not isinstance(err, ApiUnavailable):
                return False
            why, first = "unavailable", RETRY_FIRST
        failures[why] += 1
        retry = True
        await asyncio.sleep(backoff.delay(failures[why], first, RETRY_MAX, jitter=JITTER))


def _refused(what: What, where: str, err: ApiError, log: Logger) -> None:
    """One warning; retried (``ApiUnavailable``: 5xx, 429, no answer) or given up (a 403,
    a missing namespace: the elector reports those, and retrying would not help)."""
    if err.status == 422 and what == "mark":
        return  # logged as an error where it was written (``Coordination``)
    if not isinstance(err, ApiUnavailable):
        message = f"could not {what} the election in Lease {where}; {COST[what]}"
        log.once(f"roster:{what}", "warning", message, lease=where, error=str(err))
    else:
        message = f"could not {what} the election in Lease {where} yet; retrying with backoff"
        log.once(f"roster:{what}:retry", "warning", message, lease=where, error=str(err))
