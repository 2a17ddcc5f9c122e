"""A planned transfer (contract §2, transfer): leadership moved on request, as safely as any hand-off.

Asked from the pod itself (``POST /transfer[?to=<pod>]`` on the status port),
or from anywhere the API reaches (``kubectl grelmicro transfer``, which writes
the request into the Lease: ``TRANSFER_ANNOTATION``, naming the holder's term,
so a request never moves a later term).
Only the leader moves its leadership, and only to a candidate the election's
roster lists (a running sidecar that joined), not to itself; without ``to``,
to the one a release would name anyway. The move is a hand-over
(``Control.hand_over``): "not leader" is told first, then the drain (the app
may acknowledge, ``drain``), then the release names the target, which claims
within milliseconds. This pod is a candidate again right after: it claims
only if the target has not within the hand-off's second, as any follower.

Guarantees: a refusal changes nothing and says why in one line; one transfer
at a time; the answer (202) comes before the move, which ``/events`` and the
state show as it happens.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from ..core import roster
from ..core.lease import TRANSFER_ANNOTATION, LeaseRecord
from ..kit.aio import Background
from ..kit.logs import Logger
from .drain import Drain, Verdict
from .observer import HANDED_OVER, Control, Observer

#: The step-down's reason, before the target's name (``metrics`` counts transfers by it).
REASON = "transfer to "


class Transfer(Observer):
    def __init__(self, drain: Drain, log: Logger) -> None:
        self.drain, self.log = drain, log
        self.control: Control | None = None
        self._moves = Background("transfer")
        self._taken: str | None = None  # the Lease's request last acted on

    async def start(self, control: Control) -> None:
        self.control = control

    def request(self, to: str | None) -> Verdict:
        """``POST /transfer?to=<pod>``: start moving leadership to ``to`` (None: the next)."""
        if self.control is None:
            return 503, "the election has not started yet; try again"
        view = self.control.view()
        state, record = view.state, view.record
        if not state.is_leader or record is None:
            holder = state.holder or "nobody"
            return 409, f"this pod does not lead {state.election} ({holder} does): ask the leader"
        if len(self._moves):
            return 409, "a transfer is already under way"
        listed = [who for _, who, _ in roster.entries(roster.notes_of(record.raw), state.lease)]
        others = [who for who in listed if who != state.identity]
        if to == state.identity:
            return 409, f"{to} already leads {state.election}"
        if to is not None and to not in others:
            known = ", ".join(others) or "none"
            return 409, (
                f"{to} is not a candidate of {state.election} that a release can name "
                f"(listed: {known}); is its sidecar running, and its app healthy?"
            )
        if not others:
            return 409, f"no other candidate of {state.election} is listed to take over"
        target = to or "the next candidate"
        self._moves.spawn(self._move(to, f"{REASON}{target}"))
        self.log.info("transferring leadership", to=target)
        return 202, f"handing {state.election} over to {target}; /events shows the move"

    async def _move(self, to: str | None, reason: str) -> None:
        assert self.control is not None
        drained = functools.partial(self.drain.until_acknowledged, reason)
        await self.control.hand_over(to, reason, drained)
        self.control.stand(True, HANDED_OVER)

    def on_lease(self, record: LeaseRecord) -> None:
        """A request written into the Lease, for this holder's term: taken once."""
        note = record.raw.get("metadata", {}).get("annotations", {}) or {}
        raw = note.get(TRANSFER_ANNOTATION) if isinstance(note, dict) else None
        if raw is None or raw == self._taken or self.control is None:
            return
        if not self.control.view().state.is_leader:
            return
        self._taken = raw
        asked = _request(raw)
        spec = record.raw.get("spec") or {}
        if asked is None:
            self.log.warning(UNREADABLE, lease=record.name, request=str(raw)[:80])
            return
        if asked.get("term") != spec.get("acquireTime"):
            return  # for another term: a leftover (the next claim drops it)
        to = asked.get("to") or None
        status, line = self.request(to if isinstance(to, str) else None)
        if status != 202:
            self.log.warning(f"transfer refused: {line}", lease=record.name)

    async def after_release(self) -> None:
        self._moves.cancel()


UNREADABLE = "a transfer request on the Lease is not readable; kubectl grelmicro transfer writes it"


def _request(raw: Any) -> dict[str, Any] | None:
    """``{"to": <pod or "">, "term": <acquireTime>}``, or None when it is not that."""
    try:
        asked = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        return None
    return asked if isinstance(asked, dict) else None
