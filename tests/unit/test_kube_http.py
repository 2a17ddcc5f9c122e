"""The API client's connections (``sidecar/kube/http.py``) against a real local server, TLS or not.

A local asyncio TLS 1.3 server with a certificate from the tests' CA: a
request's round trip on one keep-alive connection, session tickets that arrive
after the handshake (not data: the connection stays usable), an idle
connection the server closed (closed here at once, so not left in CLOSE-WAIT,
and never reused; over plain HTTP too, where asyncio keeps it half-open), the
end of a stream with and without close_notify, and each way of failing as the
one ``Unreachable`` message it has always been. (What a connection costs is a
footprint number: the bench's footprint scenario measures the sidecar's RSS,
not a test.)
"""

from __future__ import annotations

import asyncio
import queue
import re
import socket
import ssl
import threading
from collections.abc import Awaitable, Callable

import pytest

from sidecar.kube.http import Connection, HttpClient, Unreachable
from tests.cluster.pki import CertificateAuthority

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
Contexts = tuple[ssl.SSLContext, ssl.SSLContext]


@pytest.fixture(scope="module")
def contexts(tmp_path_factory: pytest.TempPathFactory) -> Contexts:
    """(server, client) contexts: the server's certificate for 127.0.0.1, the client trusting its CA."""
    ca = CertificateAuthority.create()
    cert, key = ca.issue("server", ips=("127.0.0.1",), server=True)
    d = tmp_path_factory.mktemp("tls")
    (d / "crt").write_bytes(cert)
    (d / "key").write_bytes(key)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(d / "crt", d / "key")
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.load_verify_locations(cadata=ca.cert_pem.decode())
    return server, client


async def _serve(server: ssl.SSLContext | None, handler: Handler) -> tuple[asyncio.Server, int]:
    srv = await asyncio.start_server(handler, "127.0.0.1", 0, ssl=server)
    return srv, srv.sockets[0].getsockname()[1]


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answer every request on the connection with 'ok', keeping it open."""
    try:
        while await reader.readuntil(b"\r\n\r\n"):
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


def test_requests_reuse_one_tls_connection(contexts: Contexts) -> None:
    async def go() -> None:
        srv, port = await _serve(contexts[0], _answer)
        http = HttpClient("127.0.0.1", port, contexts[1])
        try:
            for _ in range(3):
                answer = await http.request("GET", "/x", [], timeout=5)
                assert (answer.status, answer.body) == (200, b"ok")
            assert len(http._idle) == 1
            await asyncio.sleep(0.2)  # session tickets, if any, have arrived by now
            conn = http._idle[0]
            assert conn.alive()  # tickets are not data
            sock = conn.writer.get_extra_info("socket")
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE)
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 30
            assert (await http.request("GET", "/x", [], timeout=5)).body == b"ok"
            assert http._idle == [conn]  # the same connection carried it
        finally:
            http.close()
            srv.close()

    asyncio.run(go())


def test_a_client_outlives_the_event_loop_of_its_connections(contexts: Contexts) -> None:
    """``status`` closes its store after ``asyncio.run`` has ended, and one client may serve
    two runs: the second opens a connection of its own (streams work in one loop only)."""
    started: queue.SimpleQueue[tuple[asyncio.AbstractEventLoop, asyncio.Event, int]]
    started = queue.SimpleQueue()

    async def server() -> None:  # in a thread of its own, so that it outlives both runs
        srv, port = await _serve(contexts[0], _answer)
        stop = asyncio.Event()
        started.put((asyncio.get_running_loop(), stop, port))
        async with srv:
            await stop.wait()

    thread = threading.Thread(target=asyncio.run, args=(server(),))
    thread.start()
    loop, stop, port = started.get(timeout=10)
    http = HttpClient("127.0.0.1", port, contexts[1])
    try:
        assert asyncio.run(http.request("GET", "/x", [], timeout=5)).body == b"ok"
        first = http._idle[0].sock
        assert asyncio.run(http.request("GET", "/x", [], timeout=5)).body == b"ok"
        second = http._idle[0].sock
        assert second is not first and first.fileno() == -1
        http.close()  # outside any loop: both are closed
        assert second.fileno() == -1 and http._idle == []
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)


def test_a_burst_of_requests_leaves_one_idle_connection(contexts: Contexts) -> None:
    async def go() -> None:
        srv, port = await _serve(contexts[0], _answer)
        http = HttpClient("127.0.0.1", port, contexts[1])
        try:
            burst = [http.request("GET", "/x", [], timeout=5) for _ in range(3)]
            assert [a.body for a in await asyncio.gather(*burst)] == [b"ok"] * 3
            assert len(http._idle) == 1
            assert (await http.request("GET", "/x", [], timeout=5)).body == b"ok"
            assert len(http._idle) == 1
        finally:
            http.close()
            srv.close()

    asyncio.run(go())


@pytest.mark.parametrize("tls", [True, False], ids=["tls", "plain"])
def test_an_idle_connection_the_server_closed_is_not_reused(contexts: Contexts, tls: bool) -> None:
    writers: list[asyncio.StreamWriter] = []

    async def answer_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        await _answer(reader, writer)

    async def go() -> None:
        srv, port = await _serve(contexts[0] if tls else None, answer_once)
        http = HttpClient("127.0.0.1", port, contexts[1] if tls else None)
        try:
            assert (await http.request("GET", "/x", [], timeout=5)).status == 200
            stale = http._idle[0].writer.get_extra_info("socket")
            writers[0].close()  # the server drops the idle connection (as at its idle timeout)
            await asyncio.sleep(0.2)
            # Noticed while idle: closed at once (no socket left in CLOSE-WAIT), out of the pool.
            assert stale.fileno() == -1 and http._idle == []
            assert (await http.request("GET", "/x", [], timeout=5)).status == 200
            assert len(writers) == 2
        finally:
            http.close()
            srv.close()

    asyncio.run(go())


def test_alive_tells_a_closed_idle_connection_before_a_request_is_sent_on_it(
    contexts: Contexts,
) -> None:
    """Without the idle watch (a connection taken from the pool is checked again)."""
    writers: list[asyncio.StreamWriter] = []

    async def keep(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        await _answer(reader, writer)

    async def go() -> None:
        srv, port = await _serve(contexts[0], keep)
        conn = await Connection.open("127.0.0.1", port, contexts[1], 5)
        try:
            await asyncio.sleep(0.2)
            assert conn.alive()
            writers[0].close()
            await asyncio.sleep(0.2)
            assert not conn.alive()
            assert not conn.alive()  # and stays so
        finally:
            conn.close()
            srv.close()

    asyncio.run(go())


def test_a_certificate_that_does_not_verify_is_one_clear_error(contexts: Contexts) -> None:
    async def go() -> None:
        srv, port = await _serve(contexts[0], _answer)
        other = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        other.load_verify_locations(cadata=CertificateAuthority.create().cert_pem.decode())
        http = HttpClient("127.0.0.1", port, other)
        try:
            with pytest.raises(
                Unreachable,
                match=r"^TLS verification of 127\.0\.0\.1:\d+ failed: \w",
            ):
                await http.request("GET", "/x", [], timeout=5)
        finally:
            srv.close()

    asyncio.run(go())


@pytest.mark.parametrize("close_notify", [True, False], ids=["close_notify", "cut"])
def test_the_end_of_the_stream_reads_as_empty(contexts: Contexts, close_notify: bool) -> None:
    """Whether the server ends TLS with close_notify or just drops the TCP connection
    (asyncio reads both as the end; h11 then tells a cut-off answer from a finished one)."""

    async def say_and_close(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"bye")
        await writer.drain()
        await asyncio.sleep(0.1)
        if close_notify:
            writer.close()
        else:
            writer.transport.abort()

    async def go() -> None:
        srv, port = await _serve(contexts[0], say_and_close)
        conn = await Connection.open("127.0.0.1", port, contexts[1], 5)
        try:
            got = b""
            while chunk := await asyncio.wait_for(conn.reader.read(65536), 5):
                got += chunk
            assert got == b"bye"
            assert await conn.reader.read(65536) == b""  # and stays so
        finally:
            conn.close()
            srv.close()

    asyncio.run(go())


# ---- each failure, one Unreachable message ---------------------------------------------


async def _hang_up(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.close()  # before any TLS


async def _silent(reader: asyncio.StreamReader, _: asyncio.StreamWriter) -> None:
    await reader.read()  # reads and never answers (no TLS either)


async def _cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nok")
    await writer.drain()
    writer.close()


@pytest.mark.parametrize(
    ("handler", "server_tls", "client_tls", "timeouts", "message"),
    [
        pytest.param(
            None, False, True, (5, 5), "cannot connect to {at}: connection refused$", id="refused"
        ),
        pytest.param(
            _hang_up, False, True, (5, 5), "cannot connect to {at}: connection reset$", id="reset"
        ),
        pytest.param(
            _silent, False, True, (0.3, 5), "cannot connect to {at}: timed out$", id="handshake"
        ),
        pytest.param(
            _silent, False, False, (5, 0.3), r"GET /x: no answer within 0\.3s$", id="silent"
        ),
        pytest.param(_cut, True, True, (5, 5), "GET /x: peer closed connection", id="cut-off"),
    ],
)
def test_each_failure_is_one_unreachable_message(
    contexts: Contexts,
    handler: Handler | None,
    server_tls: bool,
    client_tls: bool,
    timeouts: tuple[float, float],
    message: str,
) -> None:
    async def go() -> None:
        with socket.socket() as bound:
            bound.bind(("127.0.0.1", 0))  # not listening: a connect to it is refused
            port = bound.getsockname()[1]
            srv = None
            if handler is not None:
                srv, port = await _serve(contexts[0] if server_tls else None, handler)
            connect, answer = timeouts
            http = HttpClient("127.0.0.1", port, contexts[1] if client_tls else None, connect)
            try:
                pattern = "^" + message.format(at=re.escape(f"127.0.0.1:{port}"))
                with pytest.raises(Unreachable, match=pattern):
                    await http.request("GET", "/x?y=1", [], timeout=answer)
                assert http._idle == []
            finally:
                if srv is not None:
                    srv.close()

    asyncio.run(go())


def test_a_timeout_as_the_handshake_completes_leaves_no_socket_closed_under_its_transport(
    contexts: Contexts, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen at 400 sidecars on 2 cores: the timeout landed after the TLS handshake, before
    ``open`` resumed; asyncio then shuts TLS down gracefully on a transport that still owns the
    socket, and closing that socket here freed its fd under it. The next socket got the same fd
    and ``sock_connect`` raised RuntimeError ("used by transport"): the sidecar exited 1."""
    real = asyncio.open_connection

    async def cancelled_after_the_handshake(
        *args: object, **kwargs: object
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        _, writer = await real(*args, **kwargs)  # type: ignore[arg-type]
        writer.close()  # what asyncio does with the new transport when the cancel lands then
        raise asyncio.CancelledError

    async def go() -> None:
        srv, port = await _serve(contexts[0], _answer)
        monkeypatch.setattr(asyncio, "open_connection", cancelled_after_the_handshake)
        try:
            with pytest.raises(asyncio.CancelledError):
                await Connection.open("127.0.0.1", port, contexts[1], 5)
            monkeypatch.undo()
            http = HttpClient("127.0.0.1", port, contexts[1])
            assert (await http.request("GET", "/x", [], timeout=5)).body == b"ok"
            http.close()
        finally:
            srv.close()

    asyncio.run(go())
