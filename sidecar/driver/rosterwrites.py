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
import datetime as dt
from collections.abc import Awaitable, Callable
from typing import Literal

from ..core import backoff, roster
from ..kit.logs import Logger
from ..kube.errors import ApiError, ApiUnavailable, Conflict, NotFound
from ..kube.leases import LeaseStore

#: A write that met another (409) is tried again after up to this, doubling to ``RETRY_MAX``.
CONFLICT_FIRST = 0.5
#: A write the API server did not answer is tried again after up to this, doubling too.
RETRY_FIRST, RETRY_MAX = 2.0, 120.0
#: The share of each wait drawn at random.
JITTER = (0.1, 1.0)
#: Tries of a leave or forget that meets other writes of the roster (409s).
FORGET_TRIES = 10

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


async def forget(
    store: LeaseStore,
    lease: str,
    identity: str,
    timeout: float | None = None,
    before: dt.datetime | None = None,
) -> None:
    """Take ``identity`` out of ``lease``'s roster (it left, or was named and never claimed;
    with ``before``, only an entry that joined before then: not a rejoin); raises
    ``ApiError``. Over the version read (from the watch cache), so an entry written since
    is judged again; read again after a short jittered wait on a 409 (a renewal, another
    candidate joining or leaving), ``FORGET_TRIES`` times at most."""
    key = roster.entry_key(lease, identity)
    for attempt in range(1, FORGET_TRIES + 1):
        obj = await store.get(lease, timeout=timeout, cached=True)
        found = roster.entry_of(roster.notes_of(obj), lease, identity)
        if obj is None or found is None or (before is not None and found[1] >= before):
            return
        meta = {"annotations": {key: None}, "resourceVersion": roster.version_of(obj)}
        try:
            await store.patch(lease, {"metadata": meta}, timeout=timeout)
            return
        except NotFound:
            return
        except Conflict:
            if attempt == FORGET_TRIES:
                raise
            await asyncio.sleep(backoff.delay(attempt, 0.05, 0.8, jitter=(0.0, 1.0)))
