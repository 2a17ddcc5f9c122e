"""The leader label follows what is published: on this pod while it leads, off otherwise.

For a Service that selects the leader while every pod stays Ready (contract §4).
A routing hint, never a safety signal: work still gates on ``valid_until``.

Guarantees:
- it is put on only for the latest state: a change that arrives while a
  request is in flight is acted on as soon as that request ends, so a pod that
  stepped down has its label taken off right after;
- it is taken off at start-up (one left by a killed sidecar) and, at shutdown,
  before the Lease is released (waited for up to ``SETTLE_BUDGET``: not a
  safety step, consumers gate on ``valid_until``, and a terminating pod leaves
  the Service's ready endpoints anyway; not at all while the API refuses the
  put for good, 403 or 404, which no retry within the budget changes);
- an API error never touches the election: it is logged once with its fix and
  retried with backoff until the label is what the state says; a label that
  should be off (or may be on) is retried as soon as any API call of the
  elector succeeds, and one known to be on at least every ``RETRY_OFF``;
- a patch without an answer (no answer, a 5xx) may have been applied: the
  label is then unknown and put again for the state of the moment, even one
  it had before (a put of "on" that was applied unheard, then a step-down).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from ..core import backoff
from ..kit import aio
from ..kit.logs import Logger
from ..kube.errors import ApiError, ApiUnavailable, Forbidden, NotFound
from .observer import Call, Control, Observer, View

RETRY_FIRST = 0.5
RETRY_MAX = 30.0
#: A label known to be on while this pod does not lead is retried at least this often.
RETRY_OFF = 1.0
#: How long the release waits for the label to come off.
SETTLE_BUDGET = 3.0
POLICY_FIX = (
    "apply manifests/leader-label.yaml (the Role that grants it and the admission policy "
    "that limits it to this label on this pod) and run the pod as its ServiceAccount "
    "grelmicro-sidecar, or the chart's leaderLabel settings"
)


class LeaderLabel(Observer):
    """Keeps one pod label equal to "this process leads"."""

    def __init__(
        self,
        put: Callable[[bool], Awaitable[None]],
        pod: str,
        log: Logger,
    ):
        self._put = put
        self.pod = pod
        self.log = log
        self.want = False
        self.have: bool | None = None  # unknown at start-up: taken off first
        #: A put of "on" (or a put over a label known on) went unanswered: it may be on.
        self._may_be_on = False
        #: The last put was refused for good (403, 404): no retry soon will change it.
        self._refused = False
        self._news = asyncio.Event()
        self._news.set()
        self._settled = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self, control: Control) -> None:
        self._task = control.spawn(self.run(), "leader-label")

    def on_state(self, view: View) -> None:
        self.offer(view.state.is_leader)

    def on_call(self, call: Call) -> None:
        """The API answers again: a label that should be off (or may be on) is retried now."""
        if call.error is None and not self.want and self.have is not False:
            self._news.set()

    async def before_release(self) -> None:
        """Wait (bounded) for the label to come off, then stop following."""
        if self._task is None:
            return
        budget = 0.0 if self._refused else SETTLE_BUDGET
        settled = asyncio.ensure_future(self._settled.wait())
        done, _ = await asyncio.wait(
            [settled, self._task], timeout=budget, return_when=asyncio.FIRST_COMPLETED
        )
        settled.cancel()
        await aio.cancel([self._task], SETTLE_BUDGET, self.log)
        if settled not in done:
            self.log.warning(
                "the leader label may still be on this pod; releasing the lease anyway",
                pod=self.pod,
                waited_seconds=budget,
                refused=self._refused,
            )

    def offer(self, leading: bool) -> None:
        """The published state; never blocks (the put happens in ``run``)."""
        if leading != self.want:
            self.want = leading
            self._settled.clear()
            self._news.set()

    async def run(self) -> None:
        failures = 0
        while True:
            await self._news.wait()
            self._news.clear()
            while self.have != self.want:
                want = self.want
                try:
                    await self._put(want)
                except ApiError as err:
                    failures += 1
                    self._refused = isinstance(err, Forbidden | NotFound)
                    retry = backoff.delay(failures, RETRY_FIRST, RETRY_MAX, jitter=(1, 1))
                    self._failed(err, retry)
                    if isinstance(err, ApiUnavailable):  # it may have been applied, unheard
                        self._may_be_on = self._may_be_on or want or self.have is True
                        self.have = None
                    # on (or may be), and it should not be: cheap, one pod
                    stale = not want and (self.have is True or self._may_be_on)
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(min(retry, RETRY_OFF) if stale else retry):
                            await self._news.wait()
                    self._news.clear()
                    continue
                failures, self._refused = 0, False
                self.log.forget_prefix("label:")
                if want or self.have is not None or self._may_be_on:
                    self.log.info("leader label " + ("set" if want else "removed"), pod=self.pod)
                self.have, self._may_be_on = want, False
            self._settled.set()

    def _failed(self, err: ApiError, retry: float) -> None:
        if isinstance(err, Forbidden):
            self.log.once(
                "label:403",
                "error",
                f"forbidden: cannot change the leader label on pod {self.pod}; {POLICY_FIX}",
                detail=str(err),
            )
        elif isinstance(err, NotFound):
            self.log.once(
                "label:404",
                "error",
                f"pod {self.pod} does not exist; $POD_NAME must be this pod's name "
                "(env valueFrom fieldRef metadata.name)",
                detail=str(err),
            )
        else:
            self.log.once(
                f"label:{err.status}",
                "warning",
                "could not change the leader label; retrying with backoff",
                pod=self.pod,
                error=str(err),
                retry_in=retry,
            )
