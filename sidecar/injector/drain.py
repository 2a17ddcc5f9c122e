"""Stopping without refusing a pod: leave the Service, answer what still comes, then stop.

A deleted injector pod leaves its Service's endpoints as its SIGTERM arrives,
but the API server's open connections to it stay, and routes not yet updated
still lead to it: a request meeting a closed socket (``failed calling webhook
… EOF``, or a refused connection) would, with ``failurePolicy: Fail``, refuse
the pod being created. So on the first SIGTERM or SIGINT the injector reports
not ready, answers what still arrives, each connection closed right after its
answer and none while idle (``WebhookServer.drain``), and stops only after
``delay``, closing then the connections left unused all along; a second signal
stops it at once.

Guarantee: ``stop`` is set exactly once, ``delay`` after the first signal, or
at the second, or at the first while nothing is served yet (nothing to drain).
"""

from __future__ import annotations

import asyncio
import signal

from ..kit.logs import Logger
from .server import WebhookServer


class Drain:
    """The injector's answer to SIGTERM and SIGINT (module docstring)."""

    def __init__(self, delay: float, server: WebhookServer, stop: asyncio.Event, log: Logger):
        self.delay, self.server, self.stop, self.log = delay, server, stop, log
        self._timer: asyncio.TimerHandle | None = None

    @property
    def draining(self) -> bool:
        return self.server.draining

    def install(self) -> None:
        """Take SIGTERM and SIGINT (over kopf's handlers: call it after ``kopf.spawn_tasks``)."""
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self.signalled, signum)

    def signalled(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if self.server.draining or self.delay <= 0 or not self.server.serving.is_set():
            self.log.info("stopping", signal=name)
            self._stop()
            return
        self.server.drain()
        self.log.info(
            "draining: answering with each connection closed, then stopping",
            signal=name,
            drain_seconds=self.delay,
        )
        self._timer = asyncio.get_running_loop().call_later(self.delay, self._stop)

    def _stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self.stop.set()
