"""Events on the Lease: who became leader and who stopped, where ``kubectl describe lease`` looks.

An observer: each acquisition ("<pod> became leader (fencing token N)") and
each step-down ("<pod> stopped leading: <reason>", shutdown included) is one
core/v1 Event regarding the Lease, reason ``LeaderElection`` (client-go's).

Guarantees: recording an Event never delays the election. Each is posted by
its own task, held back for a time drawn from ``HOLD_SECONDS`` (a shutdown's,
until after the release): in a mass rollout the claims and releases go first,
the successors' Events spread over seconds after the burst, not in it, and
each rides the election's idle keep-alive connection, not a TLS handshake of
its own, on a machine where hundreds of them compete for the CPU. A token bucket (5 at once, then one
per 30 s) bounds what a flapping candidate can write. A 403 is reported once
with the fix and ends recording for this process: a missing permission costs
nothing else. Any other failure loses that one Event (logged at debug).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import random
import time
from collections.abc import Callable
from typing import Any

from ..core.election import Event
from ..core.lease import format_microtime
from ..kit import aio
from ..kit.logs import Logger
from ..kube.api import Post
from ..kube.errors import ApiError, Forbidden
from .observer import Observer, View

BURST = 5
#: How long an Event waits before it is posted, drawn per Event from this range (seconds;
#: ``close`` sends the held ones at once).
HOLD_SECONDS = (1.0, 10.0)
REFILL_SECONDS = 30.0
REASON = "LeaderElection"  # client-go's reason for the same Events
COMPONENT = "grelmicro-sidecar"
EVENTS_RBAC_FIX = (
    "grant create and patch on events in this namespace to the pod's ServiceAccount "
    "(manifests/rbac.yaml, the chart's workloadRBAC and autoRBAC do)"
)


class EventRecorder(Observer):
    def __init__(
        self,
        post: Post,
        lease: str,
        namespace: str,
        identity: str,
        log: Logger,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ):
        self._post = post
        self.lease = lease
        self.namespace = namespace
        self.identity = identity
        self.log = log
        self._monotonic = monotonic
        self._wall = wall
        self._tokens = float(BURST)
        self._filled_at = monotonic()
        self._enabled = True
        self._pending = aio.Background("event")
        self._flush = asyncio.Event()
        self.dropped = 0

    def on_event(self, event: Event, view: View) -> None:
        raw = view.record.raw if view.record is not None else None
        if event.kind == "leading":
            what = f"became leader (fencing token {event.fencing_token})"
            self.record(raw, self.lease, "Acquire", f"{self.identity} {what}")
        elif event.kind == "stepped_down":
            self.record(
                raw, self.lease, "StepDown", f"{self.identity} stopped leading: {event.detail}"
            )

    async def after_release(self) -> None:
        await self.close()

    def record(self, lease: dict[str, Any] | None, name: str, action: str, message: str) -> None:
        """Queue one Event about Lease ``name`` (``lease``: its last known object, for the uid)."""
        if not self._enabled:
            return
        if not self._take():
            self.dropped += 1  # over the rate limit
            return
        hold = random.uniform(*HOLD_SECONDS)
        self._pending.spawn(self._send(self._body(lease, name, action, message), hold))

    def _take(self) -> bool:
        now = self._monotonic()
        self._tokens = min(BURST, self._tokens + (now - self._filled_at) / REFILL_SECONDS)
        self._filled_at = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True

    def _body(
        self, lease: dict[str, Any] | None, name: str, action: str, message: str
    ) -> dict[str, Any]:
        meta = (lease or {}).get("metadata") or {}
        regarding = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "name": name,
            "namespace": self.namespace,
        }
        if meta.get("uid"):
            regarding["uid"] = str(meta["uid"])
        stamp = format_microtime(self._wall())
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{name}.", "namespace": self.namespace},
            "involvedObject": regarding,
            "reason": REASON,
            "action": action,
            "message": message,
            "type": "Normal",
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.identity[:128],
            "firstTimestamp": stamp[:19] + "Z",
            "lastTimestamp": stamp[:19] + "Z",
            "count": 1,
        }

    async def _send(self, body: dict[str, Any], hold: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(hold):
                await self._flush.wait()
        try:
            await self._post(body)
        except Forbidden:
            self._enabled = False
            self.log.once(
                "events:403",
                "warning",
                "cannot record Events on the Lease: forbidden; leadership is unaffected",
                fix=EVENTS_RBAC_FIX,
            )
        except ApiError as err:
            self.log.debug("could not record an Event", error=str(err))

    async def close(self, timeout: float = 1.0) -> None:
        """Send the held Events now, give them a moment to go out (shutdown), drop the rest."""
        self._flush.set()
        if pending := set(self._pending):
            await asyncio.wait(pending, timeout=timeout)
        self._pending.cancel()
