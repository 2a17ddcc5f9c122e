"""One request of the election loop through its lock: a read, a write or the release, told.

What an answer means is the state machine's (``core.election``): here it is
only told, to the election (``on_read``, ``on_written``, ``on_conflict``,
``on_not_found``, ``on_error``) and, for every request that ends, to the
observers (``Call``). A create refused with 404 is no transient error (the
namespace is missing): it is retried at the slowest backoff step.
"""

from __future__ import annotations

import math

from ..core.election import Election, Write
from ..kit.clock import Clock
from ..kit.logs import Logger
from ..kube.errors import ApiError, Conflict, NotFound
from .electionlock import Absent, ElectionLock
from .observer import Call, Observers


async def read(
    lock: ElectionLock, election: Election, observers: Observers, clock: Clock, timeout: float
) -> None:
    try:
        obj = await lock.read(timeout, claiming=not election.resigned)
    except ApiError as err:
        observers.on_call(Call("read", err))
        election.on_error(clock.monotonic(), err.retry_after)
        return
    observers.on_call(Call("read"))
    if isinstance(obj, Absent):
        election.on_read(None, clock.monotonic(), first_term=obj.first_term)
    else:
        election.on_read(obj, clock.monotonic())


async def write(
    lock: ElectionLock,
    election: Election,
    observers: Observers,
    clock: Clock,
    action: Write,
    timeout: float,
) -> None:
    kind = "create" if action.create else action.purpose
    started = clock.monotonic()
    try:
        if action.create:
            obj = await lock.create(action.body, timeout)
        else:
            obj = await lock.replace(action.body, timeout)
    except Conflict:
        election.on_conflict(clock.monotonic())
        return
    except NotFound as err:
        if action.create:  # a create cannot miss the Lease: the namespace is missing
            observers.on_call(Call("create", err))
            election.on_error(clock.monotonic(), retry_after=math.inf)
        else:
            election.on_not_found(clock.monotonic())
        return
    except ApiError as err:
        observers.on_call(Call(kind, err))
        election.on_error(clock.monotonic(), err.retry_after)
        return
    now = clock.monotonic()
    election.on_written(obj, started, now)
    observers.on_call(Call(kind, seconds=now - started))


#: The release's own deadline, well inside the default 30 s grace period.
RELEASE_BUDGET = 10.0


async def release(
    lock: ElectionLock, election: Election, clock: Clock, log: Logger, successor: str | None
) -> None:
    """The release, within ``RELEASE_BUDGET``; one that fails is logged and the Lease is left
    to expire (its successor waits a lease): never raised into a hand-over or a shutdown."""
    try:
        await lock.release(election, clock, log, RELEASE_BUDGET, successor)
    except ApiError as err:
        log.warning("the release failed; the Lease will expire", error=str(err))
