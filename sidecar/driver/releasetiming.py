"""A release never cuts short a ``valid_until`` the application may still act on (contract §5).

The application is told it may act until ``valid_until`` (contract §4), and a
release lets a successor lead at once: safe only when the application has
stopped. On pod deletion it has (the sidecar is a native sidecar: the kubelet
stops the app containers first, then the sidecar; contract §5), so the
release goes out at once. When the sidecar stops while its app may run on
(its own liveness kill, an in-place update of its container, a crash after a
graceful shutdown) this observer holds the release back until the last
``valid_until`` it published has passed: the successor then leads no sooner
than the app stops acting. Which case it is: ``auto`` asks the API server
whether this pod is being deleted (one GET of the pod; no answer, or no pod,
counts as "may run"); ``now`` always releases at once (outside a pod, or an
app that checks ``/leader`` before each action); ``after-valid-until`` always
waits.

``auto`` asks as the shutdown begins (``asking``, first of the shutdown's
steps), not after the label and the subscribers: the kubelet stops this
container for a deletion only once it has seen it, so a deletion that the
answer does not show came after this stop began (a liveness kill, an in-place
update), and the app may run on. Not the app containers' status: the kubelet
writes their end only once the whole pod has stopped, this sidecar included,
so during a deletion it still says "running" whatever the app did.

While it holds the release back, the app is told so (``drain``) and may end
the wait early by saying it has stopped acting (``drain.Drain``).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable

from ..kit.clock import Clock
from ..kit.logs import Logger
from ..kube.errors import ApiError
from .drain import Drain
from .observer import Observer, View

#: ``deleting(timeout)``: whether this pod is being deleted (``kube.api.PodLabel.deleting``).
Deleting = Callable[[float], Awaitable[bool]]
#: How long ``auto`` waits for the answer about its pod.
ASK_BUDGET = 1.0
UNKNOWN = (
    "cannot tell whether this pod is being deleted; holding the release until "
    "valid_until (grant get on pods to the pod's ServiceAccount: manifests/rbac.yaml)"
)


class ReleaseTiming(Observer):
    def __init__(
        self, policy: str, deleting: Deleting | None, drain: Drain, clock: Clock, log: Logger
    ):
        self.policy, self.deleting, self.clock, self.log = policy, deleting, clock, log
        self.drain = drain
        #: The last ``valid_until`` published, on the monotonic clock (-inf: none yet).
        self.until = -math.inf
        self._answer: asyncio.Future[bool] | None = None
        #: Wired before every other step of the shutdown: asks there (module docstring).
        self.asking: Observer = _Ask(self)

    def on_state(self, view: View) -> None:
        if view.valid_until is not None:
            self.until = view.valid_until

    def ask(self) -> None:
        """Send the question now, if the answer may matter; ``before_release`` waits for it."""
        if self._answer is None and self.policy == "auto" and self.until > self.clock.monotonic():
            self._answer = asyncio.ensure_future(self._app_stopped())

    async def before_release(self) -> None:
        self.ask()  # not asked yet (no ``asking`` wired): now
        answer, self._answer = self._answer, None
        left = self.until - self.clock.monotonic()
        if left <= 0 or self.policy == "now":
            if answer is not None:
                answer.cancel()
            return
        if answer is not None and await answer:
            return
        if self.drain.acknowledged:
            return
        self.log.info(
            "the app may still act on the last valid_until; releasing once it has passed "
            "or the app acknowledges (POST /drained)",
            wait_seconds=round(left, 3),
        )
        await self.drain.until_acknowledged("stopping", self.until - self.clock.monotonic())

    async def _app_stopped(self) -> bool:
        """Whether this pod is being deleted (its app containers stopped before this one)."""
        if self.policy != "auto" or self.deleting is None:
            return False
        try:
            return await self.deleting(ASK_BUDGET)
        except ApiError as err:
            self.log.once("release-timing", "warning", UNKNOWN, error=str(err))
            return False


class _Ask(Observer):
    """``ReleaseTiming``'s question, sent as the shutdown begins (before the label and the rest)."""

    def __init__(self, timing: ReleaseTiming):
        self.timing = timing

    async def before_release(self) -> None:
        self.timing.ask()
