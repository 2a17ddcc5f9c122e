"""What reacts to the election from outside: the observer protocol, and what an observer sees.

The elector runs the election and nothing else. Everything that reacts to it
(state file and HTTP, metrics, leader label, Events, logs, the hand-off's
roster, the sweep duty, ``lock``) is an ``Observer`` wired in one place
(``commands.wiring``), in a list whose order is the order of every call below:
a new feature is one observer and one line of wiring. The elector guarantees:

- ``on_state`` gets every state that differs from the last one
  (``State.comparable``), and once more, forced, at shutdown with "not leader";
- ``on_event`` gets every election event once, in order, before the
  ``on_state`` of the step that caused it;
- ``on_call`` gets the end of every API request of the elector, failed or not,
  and the watch's first answer after a failure (the API works again);
- ``on_lease`` gets every version of the Lease the watch shows, after the
  election has taken it in;
- at shutdown, after the forced "not leader": every ``before_release`` (in
  order; where an observer makes sure nobody acts on this leadership any more,
  since the release lets a successor lead at once), then the release (unless
  an observer ``keeps_lease``: then the Lease is left to expire), then every
  ``after_release`` (in order, within the shutdown budget).

Callbacks are synchronous and must not block: anything slow runs in a task
(``Control.spawn`` for one whose end would be a bug).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import math
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from ..core.election import Election, Event
from ..core.lease import LeaseRecord, format_microtime
from ..core.state import State
from ..kube.errors import ApiError

#: What holds a candidate back after ``Control.hand_over``, until ``stand(True, HANDED_OVER)``.
HANDED_OVER = "handed over"


@dataclass(frozen=True)
class View:
    """The election at one instant, as observers see it."""

    #: What the application is told.
    state: State
    #: Monotonic instant until which this process vouches for its leadership (None: it does not).
    valid_until: float | None
    #: The Lease as last seen (None when absent or not yet read).
    record: LeaseRecord | None
    #: Seconds since this candidate last saw the Lease change, on its monotonic clock (inf: never).
    unchanged_for: float = math.inf

    @classmethod
    def of(cls, election: Election, name: str, now: float, now_wall: dt.datetime) -> View:
        """``election`` (named ``name``) at monotonic ``now``; its state written at ``now_wall``."""
        leading, record = election.is_leader(now), election.record
        state = State(
            election=name,
            namespace=election.namespace,
            lease=election.lease,
            identity=election.identity,
            is_leader=leading,
            holder=record.holder if record is not None else None,
            fencing_token=election.fencing_token if leading else None,
            acquired_at=_iso(record.acquire_time) if record is not None else None,
            renewed_at=_iso(record.renew_time) if record is not None else None,
            valid_until=_iso(election.vouched_until(now)),
            updated_at=format_microtime(now_wall),
        )
        return cls(state, election.valid_until(now), record, now - election.seen.observed_at)


def _iso(when: dt.datetime | None) -> str | None:
    return format_microtime(when) if when is not None else None


@dataclass(frozen=True)
class Call:
    """One API request of the elector, and how it ended."""

    kind: Literal["read", "create", "acquire", "renew", "watch"]
    error: ApiError | None = None
    #: How long it took (successful writes).
    seconds: float = 0.0
    #: ``watch``: when it reconnects after this error.
    retry_in: float = 0.0


class Control(Protocol):
    """What an observer may ask of the elector: ``view``, the election now (computed at the
    call, from the live state and the clock); ``healthy``, liveness (every task of the elector
    and every spawned task still runs); ``stop``, the graceful shutdown (contract §5);
    ``spawn``, to run ``work`` for the process's life (its end before shutdown is a bug, exit 1);
    ``hand_over``, leadership off this candidate while it runs on (step down, ``drained``, a
    release naming ``successor``; False when it did not lead); ``stand``, whether it may claim.
    """

    def view(self) -> View: ...
    def healthy(self) -> bool: ...
    def stop(self) -> None: ...
    def spawn(self, work: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]: ...
    async def hand_over(
        self, successor: str | None, reason: str, drained: Callable[[float], Awaitable[None]]
    ) -> bool: ...
    def stand(self, candidate: bool, why: str) -> None: ...


class Observer:
    """Reacts to the election; every method does nothing unless overridden."""

    async def start(self, control: Control) -> None:
        """Before the election starts; an exception here stops the process (exit 1)."""

    def on_state(self, view: View) -> None:
        """A new state was published."""

    def on_event(self, event: Event, view: View) -> None:
        """Something happened to the election."""

    def on_call(self, call: Call) -> None:
        """An API request of the elector ended."""

    def on_lease(self, record: LeaseRecord) -> None:
        """The watch showed a new version of the Lease (annotations too: a request to the
        holder), once the election has taken it in."""

    async def before_release(self) -> None:
        """Shutdown, "not leader" published: make sure nobody acts on it any more."""

    def keeps_lease(self) -> bool:
        """Shutdown, after every ``before_release``: True leaves the Lease to expire, unreleased
        (something that acted on this leadership still runs: a release would let a successor
        lead beside it sooner than the Lease's expiry does)."""
        return False

    async def after_release(self) -> None:
        """Shutdown, the Lease released (or left to expire): tidy up."""


class Observers(list[Observer]):
    """The wired observers as one: each call goes to every one, in the wiring's order."""

    _told: dict[str, Any] | None = None  # the last state told (``State.comparable``)

    async def start(self, control: Control) -> None:
        for observer in self:
            await observer.start(control)

    def on_event(self, event: Event, view: View) -> None:
        for observer in self:
            observer.on_event(event, view)

    def on_lease(self, record: LeaseRecord) -> None:
        for observer in self:
            observer.on_lease(record)

    def on_state(self, view: View, force: bool = False) -> None:
        """Tell ``view`` if its state differs from the last one told, or when ``force``d."""
        comparable = view.state.comparable()
        if force or comparable != self._told:
            self._told = comparable
            for observer in self:
                observer.on_state(view)

    def on_call(self, call: Call) -> None:
        for observer in self:
            observer.on_call(call)

    async def before_release(self) -> None:
        for observer in self:
            await observer.before_release()
