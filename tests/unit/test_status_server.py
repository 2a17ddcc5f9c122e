"""The status port in-process: real sockets on this host, a state that the test moves by hand.

What the pod's own app is promised (contract §4): its change notifications
always get a slot whatever other clients hold, a client that hangs up frees
its slot at once, when connections run out every one from outside goes first,
and before a release every subscriber has been told "not leader" or lost its
stream.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
from collections.abc import Awaitable, Callable

import pytest

from sidecar.core.state import State
from sidecar.kit.logs import Logger
from sidecar.publish import http
from sidecar.publish.changes import Changes
from sidecar.publish.http import MAX_CONNECTIONS, StatusServer
from sidecar.publish.notify import MAX_LOCAL, MAX_REMOTE
from tests.cluster.controlplane import free_port

LEADER = State(
    election="main",
    namespace="ns",
    lease="leader-main",
    identity="pod-a",
    is_leader=True,
    holder="pod-a",
    fencing_token=7,
    acquired_at=None,
    renewed_at=None,
    valid_until="2026-01-01T00:00:10.000000Z",
    updated_at="2026-01-01T00:00:00.000000Z",
)
NOT_LEADER = dataclasses.replace(LEADER, is_leader=False, fencing_token=None, valid_until=None)


def this_hosts_address() -> str:
    """An address of this host that is not loopback: connections from it come from 'outside'."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))
        except OSError:
            pytest.skip("this host has no address but loopback")
        address = str(s.getsockname()[0])
    if address.startswith("127."):
        pytest.skip("this host has no address but loopback")
    return address


class Served:
    """A status server on a free port, and helpers to talk to it the way clients do."""

    def __init__(self) -> None:
        self.state = LEADER
        self.changes = Changes(self.state)
        self.port = free_port()
        self.server = StatusServer(
            self.port, lambda: self.state, lambda: True, lambda: "", Logger("error"), self.changes
        )

    def publish(self, state: State) -> None:
        self.state = state
        self.changes.offer(state)

    async def request(self, target: str, host: str = "127.0.0.1") -> Client:
        reader, writer = await asyncio.open_connection(host, self.port)
        writer.write(f"GET {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        await writer.drain()
        return Client(reader, writer)

    async def post(self, target: str, host: str = "127.0.0.1") -> Client:
        reader, writer = await asyncio.open_connection(host, self.port)
        writer.write(f"POST {target} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n".encode())
        await writer.drain()
        return Client(reader, writer)

    async def idle(self, host: str) -> Client:
        """A connection that never sends a whole request."""
        reader, writer = await asyncio.open_connection(host, self.port)
        writer.write(b"GET /le")
        await writer.drain()
        return Client(reader, writer)

    async def body_pending(self, host: str) -> Client:
        """A connection whose request head announces a body that never comes, once answered."""
        reader, writer = await asyncio.open_connection(host, self.port)
        writer.write(b"GET /status HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n")
        await writer.drain()
        client = Client(reader, writer)
        assert await client.status() == 200  # the head was read: the server awaits the body
        return client


@dataclasses.dataclass
class Client:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    async def status(self) -> int:
        line = await asyncio.wait_for(self.reader.readline(), 5)
        return int(line.split()[1]) if line else 0

    async def read_until(self, marker: bytes, timeout: float = 5) -> bytes:
        got = b""
        async with asyncio.timeout(timeout):
            while marker not in got:
                chunk = await self.reader.read(65536)
                if not chunk:
                    break
                got += chunk
        return got

    async def hears(self, marker: bytes) -> bool:
        """Whether ``marker`` arrives on this connection (False when it is closed first)."""
        try:
            return marker in await self.read_until(marker)
        except ConnectionError:
            return False

    def hang_up(self) -> None:
        self.writer.transport.abort()


def served(test: Callable[[Served], Awaitable[None]]) -> None:
    async def go() -> None:
        s = Served()
        await s.server.start()
        try:
            await test(s)
        finally:
            await s.server.close()

    asyncio.run(go())


def test_streams_from_outside_the_pod_never_take_the_apps_slots() -> None:
    """40 streams held from another address: the app's stream and long poll still get in."""
    outside = this_hosts_address()

    async def test(s: Served) -> None:
        remote = [await s.request("/events", outside) for _ in range(40)]
        codes = [await c.status() for c in remote]
        assert codes.count(200) == MAX_REMOTE and codes.count(429) == 40 - MAX_REMOTE, codes
        app = await s.request("/events")
        assert await app.status() == 200
        poll = await s.request("/leader?wait=30s")
        await asyncio.sleep(0.2)
        s.publish(NOT_LEADER)
        assert await poll.status() == 503  # answered at the change, not refused
        streams = [await s.request("/events") for _ in range(MAX_LOCAL - 1)]
        assert [await c.status() for c in streams] == [200] * (MAX_LOCAL - 1)
        refused = await s.request("/events")
        assert await refused.status() == 429  # the app's own pool is bounded too

    served(test)


def test_a_long_poll_whose_client_hangs_up_frees_its_slot_at_once() -> None:
    async def test(s: Served) -> None:
        polls = [await s.request("/leader?wait=5m") for _ in range(MAX_LOCAL)]
        await asyncio.sleep(0.2)
        full = await s.request("/leader?wait=5m")
        assert await full.status() == 429
        for poll in polls:
            poll.hang_up()
        await asyncio.sleep(0.2)
        again = await s.request("/leader?wait=1s")
        assert await again.status() == 200  # a slot: the hung-up polls left theirs at once

    served(test)


def test_a_stream_whose_client_hangs_up_frees_its_slot_at_once() -> None:
    async def test(s: Served) -> None:
        streams = [await s.request("/events") for _ in range(MAX_LOCAL)]
        assert [await c.status() for c in streams] == [200] * MAX_LOCAL
        for stream in streams:
            stream.hang_up()
        await asyncio.sleep(0.2)
        again = await s.request("/events")
        assert await again.status() == 200

    served(test)


def test_when_connections_run_out_the_idle_ones_go_and_every_stream_stays() -> None:
    """contract §4: a flood of idle connections from outside closes its own oldest, not streams."""
    outside = this_hosts_address()

    async def test(s: Served) -> None:
        app = [await s.request("/events") for _ in range(MAX_LOCAL)]
        assert [await c.status() for c in app] == [200] * MAX_LOCAL
        remote = [await s.request("/events", outside) for _ in range(MAX_REMOTE)]
        assert [await c.status() for c in remote] == [200] * MAX_REMOTE
        idle = [await s.idle(outside) for _ in range(MAX_CONNECTIONS - MAX_LOCAL - MAX_REMOTE)]
        await asyncio.sleep(0.2)
        flood = [await s.idle(outside) for _ in range(3 * MAX_CONNECTIONS)]
        await asyncio.sleep(0.2)
        assert [await c.reader.read() for c in idle] == [b""] * len(idle)  # the oldest idle went
        s.publish(NOT_LEADER)
        for stream in [*app, *remote]:  # every stream is still there and hears the change
            assert b'"is_leader":false' in await stream.read_until(b'"is_leader":false')
        del flood

    served(test)


def test_bodies_that_never_come_from_outside_never_close_the_apps_stream() -> None:
    """Issue 38: heads with ``Content-Length: 1`` and no body, from outside, fill every slot
    again and again; the connections closed to admit them are theirs, never the app's stream."""
    outside = this_hosts_address()

    async def test(s: Served) -> None:
        app = await s.request("/events")
        assert await app.status() == 200
        flood = [await s.body_pending(outside) for _ in range(3 * MAX_CONNECTIONS)]
        s.publish(NOT_LEADER)
        assert await app.hears(b'"is_leader":false'), "the app's stream was closed"
        del flood

    served(test)


def test_a_client_outside_that_does_not_read_its_answers_goes_before_the_apps_stream(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Once its requests are whole, a client outside the pod that pipelines more answers
    than the buffers hold and reads none holds its slot while they are written: the port
    is down to two connections, so the next one must close that client's or the app's."""
    outside = this_hosts_address()
    monkeypatch.setattr(http, "MAX_CONNECTIONS", 2)

    async def test(s: Served) -> None:
        app = await s.request("/events")
        assert await app.status() == 200
        s.publish(dataclasses.replace(LEADER, holder="h" * 4000))  # each answer about 8 kB
        loop, greedy = asyncio.get_running_loop(), socket.socket()
        greedy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        greedy.setblocking(False)
        await loop.sock_connect(greedy, (outside, s.port))
        pipelined = b"GET /status HTTP/1.1\r\nHost: x\r\n\r\n" * 2000  # 16 MB to answer
        await loop.sock_sendall(greedy, pipelined)
        await asyncio.sleep(0.5)
        probe = await s.request("/healthz", outside)
        assert await probe.status() == 200
        s.publish(NOT_LEADER)
        assert await app.hears(b'"is_leader":false'), "the app's stream was closed"
        greedy.close()

    served(test)


def test_flush_tells_every_reading_subscriber_and_closes_one_that_does_not_read() -> None:
    """Before the release: "not leader" written to every stream, or the stream closed, in time."""

    async def test(s: Served) -> None:
        reading = await s.request("/events")
        assert await reading.status() == 200
        stuck_reader, stuck = socket.socket(), None
        stuck_reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stuck_reader.connect(("127.0.0.1", s.port))
        stuck_reader.sendall(b"GET /events HTTP/1.1\r\nHost: x\r\n\r\n")
        await asyncio.sleep(0.2)
        big = dataclasses.replace(LEADER, holder="h" * 4000)  # each event about 4 kB
        for i in range(4000):  # 16 MB: more than the stuck connection's buffers hold
            s.publish(dataclasses.replace(big, fencing_token=i))
            await asyncio.sleep(0)
        await reading.read_until(b'"fencing_token":3999', timeout=30)
        s.publish(NOT_LEADER)
        loop = asyncio.get_running_loop()
        started = loop.time()
        await s.server.notify.flush(bound=1.0)
        took = loop.time() - started
        assert took <= 1.0 + 3.0, took  # its bound, and room for a loaded machine
        got = await reading.read_until(b'"is_leader":false', timeout=5)
        assert b'"is_leader":false' in got  # written before flush returned
        stuck_reader.setblocking(False)
        await asyncio.sleep(0.1)
        received = b""
        while True:
            try:
                chunk = stuck_reader.recv(1 << 20)
            except BlockingIOError:
                raise AssertionError("the stuck stream is still open after flush") from None
            except ConnectionResetError:
                break
            if not chunk:
                break
            received += chunk
        assert b'"is_leader":false' not in received  # it lost its stream instead
        stuck_reader.close()
        del stuck

    served(test)


class Acknowledgements:
    """Records what ``POST /drained`` passes on (the drain's own rules: ``test_drain``)."""

    def __init__(self) -> None:
        self.tokens: list[str | None] = []

    def acknowledge(self, token: str | None) -> tuple[int, str]:
        self.tokens.append(token)
        return 200, "acknowledged"


def test_a_drain_is_acknowledged_from_the_pod_itself_only() -> None:
    """``POST /drained`` from loopback reaches the drain; from another address it is refused
    (403) and reaches nothing: only the pod's own app may say it has stopped acting."""
    outside = this_hosts_address()

    async def test(s: Served) -> None:
        acks = Acknowledgements()
        s.server.actions = {"/drained": lambda asked: acks.acknowledge(asked.get("token"))}
        inside = await s.post("/drained?token=7")
        assert await inside.status() == 200
        assert b"acknowledged" in await inside.read_until(b"acknowledged")
        assert await (await s.post("/drained?token=8", host=outside)).status() == 403
        assert await (await s.post("/drained")).status() == 200
        assert acks.tokens == ["7", None]
        assert await (await s.request("/drained?token=7")).status() == 405
        assert await (await s.post("/leader")).status() == 405
        assert acks.tokens == ["7", None]

    served(test)


def _shard(i: int, owned: bool) -> dict[str, object]:
    return {"shard": i, "lease": f"leader-main-shard-{i}", "is_leader": owned, "holder": "pod-a"}


def test_shards_answer_whether_this_pod_owns_each_and_a_plain_election_has_none() -> None:
    served = Served()
    sharded = dataclasses.replace(NOT_LEADER, shards=[_shard(0, False), _shard(1, True)])
    served.publish(sharded)
    assert served.server.answer("GET", "/shards/1")[0] == 200
    status, _, body = served.server.answer("GET", "/shards/0")
    assert status == 503 and b'"shard": 0' in body
    status, _, body = served.server.answer("GET", "/shards/2")
    assert status == 404 and b"0 to 1" in body
    assert served.server.answer("GET", "/shards/x%00")[0] == 404
    served.publish(LEADER)
    status, _, body = served.server.answer("GET", "/shards/0")
    assert status == 404 and b"not sharded" in body
    assert "shards" not in LEADER.as_dict()  # a plain election's state is as it was
    assert sharded.as_dict()["shards"][1]["is_leader"] is True
