"""The drain: between the end of a term and its release, the app may say it has stopped.

A leader that stops while its app may run on releases only once the last
``valid_until`` it published has passed (``releasetiming``): the app may act
until then. An app that has stopped sooner says so (``POST /drained`` on
loopback, or the term's token written into ``--ack-file``, for an app that
only reads and writes files), and the release goes out at that
acknowledgement instead of the deadline: never before either one (contract
§4, the drain). The file is read only while a drain waits, every
``FILE_POLL`` seconds: nothing the rest of the time.

Guarantees: an acknowledgement counts only for the term it names, only once
this sidecar no longer leads that term, and only from the pod itself; one for
an older term, or sent while the term is still led, is refused and changes
nothing. So a late acknowledgement of term 5 never cuts short the drain of
term 6. The drain is told in the published state (``drain``: the token, the
deadline and why) before the release waits on it; apps that ignore it behave
as before, released at the deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..kit.logs import Logger
from .observer import Observer, View

#: ``(status, one line)``: what ``POST /drained`` answers.
Verdict = tuple[int, str]
#: How often a waiting drain reads ``--ack-file``.
FILE_POLL = 0.01
#: The most of the file read: a token is a few digits.
FILE_BYTES = 64
UNREADABLE = "cannot read the ack file {}; the drain ends at valid_until (let the sidecar read it)"
NOT_A_TOKEN = (
    "the ack file {} says {!r}, not a fencing token; the drain ends at valid_until "
    "(write the ended term's fencing_token, digits only)"
)


#: How a drain that waited ended (``grelmicro_sidecar_drains_total{ended}``).
ACKNOWLEDGED, DEADLINE = "acknowledged", "deadline"


class Drain(Observer):
    def __init__(
        self,
        log: Logger,
        ack_file: Path | None = None,
        on_end: Callable[[str], None] = lambda ended: None,
    ) -> None:
        """``on_end``: told how each drain that was announced ended (``ACKNOWLEDGED`` or
        ``DEADLINE``), so an app that stops acknowledging shows (``metrics``)."""
        self.log, self.ack_file, self.on_end = log, ack_file, on_end
        #: The last term this sidecar led: its fencing token and its published valid_until.
        self.token: int | None = None
        self.until: str | None = None
        self._leading = False
        self._acked = asyncio.Event()
        #: The drain as told to the app (None: none under way).
        self.notice: dict[str, Any] | None = None
        #: Called once the notice changes, to publish it (``AppPublisher``).
        self.on_notice: Callable[[], None] = lambda: None

    def on_state(self, view: View) -> None:
        state = view.state
        led, self._leading = self._leading, state.is_leader
        if state.is_leader and state.fencing_token is not None:
            if not led or state.fencing_token != self.token:
                # Leading again, even under the same token: the app may act again, and
                # what it acknowledged before says nothing about what it does now.
                self._acked.clear()
                self.notice = None
            self.token, self.until = state.fencing_token, state.valid_until

    def _begin(self, reason: str) -> None:
        """Tell the app the term ``token`` ends at ``until`` or at its acknowledgement."""
        if self.token is None or self.notice is not None:
            return
        self.notice = {"token": self.token, "until": self.until, "reason": reason}
        self.on_notice()

    async def until_acknowledged(self, reason: str, seconds: float) -> None:
        """The whole drain (of a stop's release, of a hand-over): told, then until acknowledged
        or ``seconds`` have passed (what is left of the term's valid_until), then no longer
        told. Nothing to wait for when acknowledged already (before the notice)."""
        if seconds > 0 and not self.acknowledged:
            self._begin(reason)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(seconds):
                    await self._wait()
            self.on_end(ACKNOWLEDGED if self.acknowledged else DEADLINE)
        self.notice = None
        self.on_notice()

    @property
    def acknowledged(self) -> bool:
        return self._acked.is_set()

    async def _wait(self) -> None:
        """Until the app acknowledges the drain (the caller bounds it by the deadline)."""
        while not self._acked.is_set():
            if self._file_says_stopped():
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(None if self.ack_file is None else FILE_POLL):
                    await self._acked.wait()

    def _file_says_stopped(self) -> bool:
        """Whether ``ack_file`` names the ended term (an earlier term's token is a leftover)."""
        if self.ack_file is None:
            return False
        try:
            with self.ack_file.open("rb") as f:
                said = f.read(FILE_BYTES).decode(errors="replace").strip()
        except FileNotFoundError:
            return False  # not written (yet)
        except OSError as err:
            self.log.once("ack-file", "warning", UNREADABLE.format(self.ack_file), error=str(err))
            return False
        if not (said.isascii() and said.isdigit()):
            self.log.once("ack-file", "warning", NOT_A_TOKEN.format(self.ack_file, said[:20]))
            return False
        return said == str(self.token) and self.acknowledge(said)[0] == 200

    def acknowledge(self, token: str | None) -> Verdict:
        """The app's ``POST /drained?token=N``: it no longer acts on term N."""
        if token is None or not (token.isascii() and token.isdigit()):
            return 400, "name the term you stopped acting on: POST /drained?token=<fencing_token>"
        term = int(token)
        if term != self.token:
            last = "none" if self.token is None else str(self.token)
            return 409, f"term {term} is not this sidecar's last term ({last}): nothing to end"
        if self._leading:
            return 409, f"term {term} is still led here: a drain begins when leadership ends"
        if not self._acked.is_set():
            self._acked.set()
            self.log.info("the app acknowledged the end of its term", fencing_token=term)
        return 200, f"term {term} acknowledged: leadership may move now"
