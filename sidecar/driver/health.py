"""Health-driven candidacy (contract §2, health): leadership follows the app's health.

Off unless a check is given: ``--health-url`` (an HTTP GET on the pod's
loopback; 200 to 399 is healthy, as for a kubelet probe) or ``--health-file``
(healthy while the app touched the file within ``file_age``). It runs every
``period``; ``failures`` failures in a row make the app unhealthy,
``successes`` passes in a row healthy again. Until the first verdict the app
counts as unhealthy, as a container is unready until its first probe passes.

While unhealthy, this candidate stands aside (``Control.stand``): it claims
nothing and leaves the roster, so no release names it. A leader whose app
turns unhealthy hands over (``Control.hand_over``, with the drain) to the
candidate a release would name, all of them healthy by the rule above, once it
has led ``hold`` (so flapping moves leadership at most once per ``hold``).
When no other candidate is listed, ``when_none`` decides: ``keep`` leads on
(an unhealthy leader is better than none, and it says so), ``nobody`` steps
down anyway. A probe's failure is a verdict, never a crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import urlsplit

from ..core import roster
from ..core.election import Event
from ..core.healthpolicy import HealthPolicy
from ..kit.clock import Clock
from ..kit.logs import Logger
from .drain import Drain
from .membership import Membership
from .observer import HANDED_OVER, Control, Observer, View

#: Why this candidate stands aside (``Control.stand``) and why a leader steps down.
UNHEALTHY = "app unhealthy"

Check = Callable[[], Awaitable[bool]]


class AppHealth(Observer):
    def __init__(
        self,
        check: Check,
        policy: HealthPolicy,
        membership: Membership,
        drain: Drain,
        clock: Clock,
        log: Logger,
        judged: Callable[[bool], None] = lambda _: None,
    ) -> None:
        self.check, self.policy, self.membership, self.drain = check, policy, membership, drain
        self.clock, self.log, self.judged = clock, log, judged
        self.healthy: bool | None = None  # None: no verdict yet (counted as unhealthy)
        self._passed = self._failed = 0
        self._led_since = 0.0  # when this candidate's current term began (monotonic)
        self.control: Control | None = None

    async def start(self, control: Control) -> None:
        self.control = control
        control.stand(False, UNHEALTHY)  # until the first verdict
        await self.membership.stand(False)
        control.spawn(self._probe(), "health")

    def on_event(self, event: Event, view: View) -> None:
        if event.kind == "leading":
            self._led_since = self.clock.monotonic()

    async def _probe(self) -> None:
        assert self.control is not None
        while True:
            try:
                async with asyncio.timeout(self.policy.timeout):
                    ok = await self.check()
            except Exception as err:  # whatever a check meets is a failed check, never a crash
                self.log.debug("health check failed", error=repr(err))
                ok = False
            await self._judge(ok)
            await asyncio.sleep(self.policy.period)

    async def _judge(self, ok: bool) -> None:
        self._passed, self._failed = (self._passed + 1, 0) if ok else (0, self._failed + 1)
        if self.healthy is not True and self._passed >= self.policy.successes:
            self.healthy = True
            self.judged(True)
            self.log.info("the app is healthy: a candidate again")
            assert self.control is not None
            self.control.stand(True, UNHEALTHY)
            await self.membership.stand(True)
        elif self.healthy is not False and self._failed >= self.policy.failures:
            self.healthy = False
            self.judged(False)
            self.log.warning("the app is unhealthy: standing aside", failures=self._failed)
            await self.membership.stand(False)
        if self.healthy is not True:
            await self._step_aside()

    async def _step_aside(self) -> None:
        """Unhealthy: a follower claims nothing; a leader hands over, as the policy says."""
        assert self.control is not None
        view = self.control.view()
        if not view.state.is_leader:
            self.control.stand(False, UNHEALTHY)
            return
        record = view.record
        notes = roster.notes_of(record.raw if record is not None else None)
        others = [
            w for _, w, _ in roster.entries(notes, view.state.lease) if w != view.state.identity
        ]
        if not others and self.policy.when_none == "keep":
            self.log.once("health-keep", "warning", NONE_HEALTHY)
            return
        if self.clock.monotonic() - self._led_since < self.policy.hold:
            return  # a move at most once per hold
        self.log.forget("health-keep")
        drained = functools.partial(self.drain.until_acknowledged, UNHEALTHY)
        await self.control.hand_over(None, UNHEALTHY, drained)
        self.control.stand(False, UNHEALTHY)  # aside for the app's health, not the hand-over
        self.control.stand(True, HANDED_OVER)


NONE_HEALTHY = (
    "the app is unhealthy and no other candidate is listed to take over; leading on "
    "(--when-none-healthy=keep; nobody steps down anyway)"
)


def http_check(url: str) -> Check:
    """GET ``url`` on loopback: healthy on 200 to 399 (the kubelet's rule)."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    request = f"GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()

    async def check() -> bool:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(request)
            line = await reader.readline()
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        fields = line.split()
        return len(fields) >= 2 and fields[1].isdigit() and 200 <= int(fields[1]) < 400

    return check


def file_check(path: Path, max_age: float) -> Check:
    """Healthy while the app touched ``path`` within ``max_age`` seconds (its mtime)."""

    async def check() -> bool:
        return time.time() - path.stat().st_mtime <= max_age

    return check
