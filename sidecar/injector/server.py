"""The webhook's HTTPS server: one TLS context reloaded in place, and a drain before it stops.

kopf runs it (``settings.admission.server``: an async generator that yields the
client config once it serves). Each ``POST /<path>`` whose path is a key of
``routes`` is answered by that route; any other path is a 404. Guarantees:

- a certificate given to ``use`` applies from the next TLS handshake on; the
  listener and the open connections are never restarted (kopf's own server
  restarts its listener when its files change, cutting requests in flight);
- while ``draining``, every response carries ``Connection: close``: the API
  server's keep-alive connections to the Service stay pinned to this pod after
  it has left the endpoints, and each one is closed after its next answer, so
  the API server's next request opens a connection to a pod that is staying;
- stopping (cancellation) waits for the requests in flight, up to ``grace``.
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

    def drain(self) -> None:
        """From now on, close each connection after its answer."""
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
            app, handle_signals=False, access_log=None, shutdown_timeout=self.grace
        )
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.host, self.port, ssl_context=self.context)
            await site.start()
            self.serving.set()
            yield kopf.WebhookClientConfig(url=f"https://{self.host}:{self.port}")
            await asyncio.Event().wait()  # until kopf cancels it, at stop
        finally:
            self.serving.clear()
            await runner.cleanup()
