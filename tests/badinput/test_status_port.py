"""A client that floods the status port must not take the sidecar down (contract §4, HTTP).

The port listens on every interface, so anything that can reach the pod IP can
open connections. These tests are the attacker: thousands of idle connections
with half-sent requests, and a request dribbled out a byte at a time. The
sidecar must keep answering the kubelet's probe from a fresh connection, keep
its memory well under the injected container's 64 Mi limit, and cut the slow
client off after a bounded time.
"""

from __future__ import annotations

import contextlib
import resource
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sidecar.proc import SidecarProcess, wait_for
from tests.sidecar.test_credentials_and_cli import Spawn

FLOOD = 3000
HALF_SENT = b"GET /leader HTTP/1.1\r\nHost: flood\r\n"


def _rss_mib(proc: SidecarProcess) -> float:
    assert proc.proc is not None
    for line in Path(f"/proc/{proc.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.fixture
def many_fds() -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = min(hard, max(soft, FLOOD + 512))
    if wanted < FLOOD + 256:
        pytest.skip(f"the open-file limit ({hard}) is too low to open {FLOOD} connections")
    resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_flood_of_half_sent_requests_keeps_probes_answered_and_memory_bounded(
    spawn: Spawn, many_fds: None
) -> None:
    leader = spawn("pod-0")
    wait_for(leader.leads, 15, what="leadership")
    before = _rss_mib(leader)
    flood: list[socket.socket] = []
    try:
        for _ in range(FLOOD):
            conn = socket.create_connection(("127.0.0.1", leader.port), timeout=5)
            with contextlib.suppress(OSError):
                conn.sendall(HALF_SENT)
            flood.append(conn)
        time.sleep(1.0)  # let the sidecar accept what the kernel queued
        started = time.monotonic()
        status, body = leader.http("/leader", timeout=5)
        answered_in = time.monotonic() - started
        peak = _rss_mib(leader)
    finally:
        for conn in flood:
            conn.close()
    assert status == 200 and body["is_leader"], (status, body)
    assert answered_in < 3.0, f"the probe waited {answered_in:.2f}s behind the flood"
    assert peak < before + 8, (
        f"RSS grew from {before:.1f} to {peak:.1f} MiB under {FLOOD} idle connections"
    )
    assert leader.alive and leader.leads()
    assert leader.http("/healthz")[0] == 200
    assert not [line for line in leader.raw_log().splitlines() if not line.startswith("{")]


def test_request_dribbled_a_byte_at_a_time_is_cut_off(spawn: Spawn) -> None:
    proc = spawn("pod-0")
    wait_for(lambda: proc.http("/healthz")[0] == 200, 15, what="the status port")
    conn = socket.create_connection(("127.0.0.1", proc.port), timeout=30)
    started = time.monotonic()
    closed_after = None
    with conn:
        for byte in HALF_SENT * 100:
            try:
                conn.sendall(bytes([byte]))
            except OSError:
                closed_after = time.monotonic() - started
                break
            time.sleep(0.25)
            if time.monotonic() - started > 30:
                break
    assert closed_after is not None, "a request that never completes held its connection for 30s"
    assert closed_after < 15, f"cut off only after {closed_after:.1f}s"
    assert proc.http("/healthz")[0] == 200


def test_request_head_beyond_16_kib_is_refused_with_431(spawn: Spawn) -> None:
    proc = spawn("pod-0")
    wait_for(lambda: proc.http("/healthz")[0] == 200, 15, what="the status port")
    with socket.create_connection(("127.0.0.1", proc.port), timeout=10) as conn:
        with contextlib.suppress(OSError):
            conn.sendall(b"GET /leader HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n")
        answer = conn.recv(64)
    assert answer.startswith(b"HTTP/1.1 431"), answer
    assert proc.http("/healthz")[0] == 200
