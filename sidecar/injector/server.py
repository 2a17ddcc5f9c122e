"""The webhook's HTTPS server: one TLS context reloaded in place, and a drain before it stops.

kopf runs it (``settings.admission.server``: an async generator that yields the
client config once it serves). Each ``POST /<path>`` whose path is a key of
``routes`` is answered by that route; any other path is a 404. Guarantees:

- a certificate given to ``use`` applies from the next TLS handshake on; the
  listener and the open connections are never restarted (kopf's own server
  restarts its listener when its files change, cutting requests in flight);
- once ``drain`` is called, every answer carries ``Connection: close`` and its
  connection closes after it. So each of the API server's keep-alive
  connections to this pod (pinned to it by the Service after it left the
  endpoints) carries at most one more request, and the API server's next
  requests open new connections, which the Service sends to the pods that
  stay; the listener stays open for what still arrives by a route not yet
  updated, answered and closed the same way;
- no connection is closed while idle before the stop: neither by the drain
  nor by a keep-alive timeout (``KEEPALIVE``, longer than the API server's).
  An HTTP/1.1 server closing an idle connection races the client writing its
  next request on it, and the API server's Go client resends no POST it has
  written (``failed calling webhook … EOF``: with ``failurePolicy: Fail`` a
  refused pod); an answer with ``Connection: close`` has no such race. The
  drain touches no busy connection either: a request still arriving when it
  starts is read to its end and answered;
- stopping (cancellation) closes the listener and the connections still idle
  (the ones the API server left unused through the whole drain: the one
  moment a request may still be cut, and none once the drain lasts longer
  than the API server keeps an idle connection) and waits for the requests in
  flight, up to ``grace``.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import kopf
from aiohttp import web

from ..kit.pem import load_chain

Route = Callable[[Any], Awaitable[Any]]

#: How long an idle connection is kept: longer than the API server keeps one (90 s, Go's
#: IdleConnTimeout as client-go sets it), so the API server closes it, never this server.
#: Set here: aiohttp's default is 3630 s in 3.14, but 75 s in older 3.x that pyproject allows.
KEEPALIVE = 3630.0


def tls_context() -> ssl.SSLContext:
    """TLS >= 1.2, no TLS 1.3 session tickets: the API server's webhook client keeps no
    session cache, so a ticket is handshake work for nothing."""
    context = ssl.create_default_context(purpose=ssl.Purpose.CLIENT_AUTH)
    context.minimum_version, context.num_tickets = ssl.TLSVersion.TLSv1_2, 0
    return context


def load_pem(context: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    """Put a certificate chain and its key into ``context``: new handshakes use them (the
    key never touches a disk, ``kit.pem``)."""
    load_chain(context, cert_pem, key_pem)


class WebhookServer:
    """The HTTPS listener of the admission webhook (module docstring)."""

    def __init__(
        self,
        routes: Mapping[str, Route],
        context: ssl.SSLContext,
        *,
        host: str,
        port: int,
        serving: asyncio.Event,
        grace: float = 5.0,
    ):
        self.routes, self.context = dict(routes), context
        self.host, self.port, self.grace = host, port, grace
        #: Set once the listener accepts connections (the health port's readiness).
        self.serving = serving
        self.draining = False
        self._runner: web.AppRunner | None = None

    def drain(self) -> None:
        """From now on, answer each request with ``Connection: close`` and close its
        connection after the answer; no connection is closed otherwise (module docstring)."""
        self.draining = True

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        route = self.routes.get(request.match_info["path"])
        if route is None:
            response: web.StreamResponse = web.Response(status=404, text="no such webhook\n")
        else:
            try:
                review = json.loads(await request.read())
            except ValueError:
                response = web.Response(status=400, text="the body is not JSON\n")
            else:
                response = web.json_response(await route(review))
        if self.draining:
            response.force_close()
        return response

    async def __call__(self, fn: kopf.WebhookFn) -> AsyncIterator[kopf.WebhookClientConfig]:
        """kopf's server protocol; ``fn`` (kopf's admission engine) is never called: every
        path this server answers has its own route."""
        del fn
        app = web.Application()
        app.router.add_post("/{path}", self._handle)
        runner = web.AppRunner(
            app,
            handle_signals=False,
            access_log=None,
            shutdown_timeout=self.grace,
            keepalive_timeout=KEEPALIVE,
        )
        await runner.setup()
        self._runner = runner
        try:
            site = web.TCPSite(runner, self.host, self.port, ssl_context=self.context)
            await site.start()
            self.serving.set()
            yield kopf.WebhookClientConfig(url=f"https://{self.host}:{self.port}")
            await asyncio.Event().wait()  # until kopf cancels it, at stop
        finally:
            self.serving.clear()
            await runner.cleanup()
