"""The webhook's HTTPS server and its drain, on real sockets (``server``, ``drain``).

A client like the API server's keeps its connection alive between requests;
the tests read what it sees: which certificate each handshake presents, when
the server asks it to close, and when the stop comes.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import select
import signal
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from cryptography import x509

from sidecar.injector.certificates import Wanted, plan
from sidecar.injector.drain import Drain
from sidecar.injector.server import WebhookServer, load_pem, tls_context
from sidecar.kit.logs import Logger

WANTED = Wanted(dns_names=("localhost",), ip_addresses=("127.0.0.1",))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Client:
    """One keep-alive HTTPS connection, as the API server's webhook client keeps one."""

    def __init__(self, port: int, ca: bytes):
        context = ssl.create_default_context(cadata=ca.decode())
        self.conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5)

    def post(self, path: str, body: Any) -> tuple[int, dict[str, str], bytes]:
        self.conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        resp = self.conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()

    def peer_serial(self) -> int:
        sock = self.conn.sock
        assert isinstance(sock, ssl.SSLSocket)
        der = sock.getpeercert(binary_form=True)
        assert der is not None
        return x509.load_der_x509_certificate(der).serial_number


Served = tuple[WebhookServer, int, Any]


def run(test: Callable[[Served], Awaitable[None]]) -> None:
    async def go() -> None:
        async with serving() as served:
            await test(served)

    asyncio.run(go())


@contextlib.asynccontextmanager
async def serving() -> AsyncIterator[Served]:
    now = datetime.now(UTC)
    material = plan(None, WANTED, now)
    assert material is not None
    context = tls_context()
    load_pem(context, material.cert, material.key)
    calls: list[Any] = []

    async def echo(review: Any) -> Any:
        calls.append(review)
        return {"seen": review}

    port = _free_port()
    server = WebhookServer(
        {"inject": echo}, context, host="127.0.0.1", port=port, serving=asyncio.Event()
    )
    frames = server(None)  # type: ignore[arg-type]
    config = await anext(frames)
    assert config["url"] == f"https://127.0.0.1:{port}"
    task = asyncio.create_task(anext(frames, None))
    try:
        yield server, port, material
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await frames.aclose()


def test_routes_answer_others_are_404_and_connections_stay_open() -> None:
    async def test(served: Served) -> None:
        server, port, material = served
        assert server.serving.is_set()
        client = Client(port, material.ca_bundle)
        status, headers, body = await asyncio.to_thread(client.post, "/inject", {"uid": "1"})
        assert (status, json.loads(body)) == (200, {"seen": {"uid": "1"}})
        assert headers.get("connection", "keep-alive").lower() != "close"
        sock = client.conn.sock
        status, _, _ = await asyncio.to_thread(client.post, "/other", {})
        assert status == 404 and client.conn.sock is sock  # the same connection, kept alive

    run(test)


def test_an_idle_connection_is_closed_by_the_api_server_not_by_this_server() -> None:
    """Closing an idle connection races the client's next request on it (below): the API
    server's client closes its own after 90 s idle (Go's IdleConnTimeout as client-go sets
    it), so this server waits longer, whatever aiohttp's default."""

    async def test(served: Served) -> None:
        server, port, material = served
        client = Client(port, material.ca_bundle)
        await asyncio.to_thread(client.post, "/inject", {})
        assert server._runner is not None
        (handler,) = server._runner.server.connections
        assert handler.keepalive_timeout > 90

    run(test)


def test_a_new_certificate_serves_the_next_handshake_without_cutting_one_open() -> None:
    async def test(served: Served) -> None:
        server, port, material = served
        old = Client(port, material.ca_bundle)
        await asyncio.to_thread(old.post, "/inject", {})
        first = old.peer_serial()
        more = Wanted(dns_names=("localhost", "again"), ip_addresses=("127.0.0.1",))
        renewed = plan(material, more, datetime.now(UTC))  # a new certificate, same CA
        assert renewed is not None and renewed.ca_bundle == material.ca_bundle
        load_pem(server.context, renewed.cert, renewed.key)
        status, _, _ = await asyncio.to_thread(old.post, "/inject", {})  # the open one goes on
        assert status == 200 and old.peer_serial() == first
        new = Client(port, material.ca_bundle)
        await asyncio.to_thread(new.post, "/inject", {})
        assert new.peer_serial() == x509.load_pem_x509_certificate(renewed.cert).serial_number

    run(test)


def _closed_by_server(sock: socket.socket, within: float) -> bool:
    """Whether the server closes ``sock`` (an idle keep-alive connection) within ``within``
    seconds: its close_notify or FIN makes the socket readable, an answer never comes."""
    return bool(select.select([sock], [], [], within)[0])


def _tls_socket(port: int, ca: bytes) -> ssl.SSLSocket:
    context = ssl.create_default_context(cadata=ca.decode())
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    return context.wrap_socket(raw, server_hostname="127.0.0.1")


def _head(body: bytes) -> bytes:
    return f"POST /inject HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode()


def _until_closed(sock: ssl.SSLSocket) -> bytes:
    """All the server sends until it closes (a timeout if it keeps the connection)."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_a_drain_answers_each_connection_once_more_then_closes_it_and_the_stop_the_rest() -> None:
    async def test() -> None:
        async with serving() as (server, port, material):
            hot = await asyncio.to_thread(_tls_socket, port, material.ca_bundle)
            cold = Client(port, material.ca_bundle)
            hot.sendall(_head(b"{}") + b"{}")
            await asyncio.to_thread(hot.recv, 65536)  # the answer; the connection stays open
            await asyncio.to_thread(cold.post, "/inject", {})
            cold_sock = cold.conn.sock
            server.drain()
            # An idle connection is left open: closing it could cross a request in flight.
            assert not await asyncio.to_thread(_closed_by_server, hot, 0.3)
            hot.sendall(_head(b"{}") + b"{}")
            answer = await asyncio.to_thread(_until_closed, hot)  # answered, then closed
            assert answer.startswith(b"HTTP/1.1 200") and b"Connection: close" in answer
            # What still arrives (a route not yet updated) is answered, then closed.
            late = Client(port, material.ca_bundle)
            status, headers, _ = await asyncio.to_thread(late.post, "/inject", {"uid": "3"})
            assert status == 200 and headers["connection"].lower() == "close"
            assert not await asyncio.to_thread(_closed_by_server, cold_sock, 0.1)
        # The stop closes what stayed idle through the drain.
        assert await asyncio.to_thread(_closed_by_server, cold_sock, 2)

    asyncio.run(test())


def test_a_request_written_as_the_drain_starts_is_answered_not_cut() -> None:
    """HTTP/1.1's keep-alive race: the API server writes a POST on an idle connection as the
    server closes it, and Go's client does not resend a POST it wrote (``failed calling
    webhook … EOF``). Here the POST is in the server's socket buffer, unread, as the drain
    starts: the event loop has not run in between."""

    async def test(served: Served) -> None:
        server, port, material = served
        client = Client(port, material.ca_bundle)
        await asyncio.to_thread(client.post, "/inject", {})
        client.conn.request("POST", "/inject", json.dumps({"uid": "4"}))  # written, not read
        server.drain()
        resp = await asyncio.to_thread(client.conn.getresponse)
        assert resp.status == 200 and json.loads(resp.read()) == {"seen": {"uid": "4"}}
        assert resp.getheader("Connection", "").lower() == "close"

    run(test)


def test_a_request_whose_body_is_still_arriving_as_the_drain_starts_is_answered() -> None:
    async def test(served: Served) -> None:
        server, port, material = served
        sock = await asyncio.to_thread(_tls_socket, port, material.ca_bundle)
        body = json.dumps({"uid": "5", "pad": "x" * 20_000}).encode()
        sock.sendall(_head(body) + body[:100])
        assert server._runner is not None
        handlers = server._runner.server.connections
        for _ in range(200):  # until the server has read the head and waits for the body
            await asyncio.sleep(0.01)
            if any(getattr(h, "_request_in_progress", False) for h in handlers):
                break
        else:
            raise AssertionError("the request never started")
        server.drain()
        sock.sendall(body[100:])
        answer = await asyncio.to_thread(_until_closed, sock)  # answered, then closed
        sock.close()
        assert answer.startswith(b"HTTP/1.1 200") and b'"uid": "5"' in answer, answer[:200]

    run(test)


def test_the_drain_stops_after_its_delay_or_at_a_second_signal() -> None:
    async def test(served: Served) -> None:
        server = served[0]
        stop = asyncio.Event()
        drain = Drain(0.3, server, stop, Logger("error"))
        loop = asyncio.get_running_loop()
        started = loop.time()
        drain.signalled(signal.SIGTERM)
        assert drain.draining and server.draining and not stop.is_set()
        await asyncio.wait_for(stop.wait(), 2)
        assert loop.time() - started >= 0.29

        server.draining = False
        server.serving.clear()  # not serving yet (its certificate is still loading): at once
        early = asyncio.Event()
        Drain(30, server, early, Logger("error")).signalled(signal.SIGTERM)
        assert early.is_set() and not server.draining
        server.serving.set()

        stop2 = asyncio.Event()
        server.draining = False
        again = Drain(30, server, stop2, Logger("error"))
        again.signalled(signal.SIGTERM)
        again.signalled(signal.SIGINT)  # the second signal: at once
        assert stop2.is_set()

    run(test)
