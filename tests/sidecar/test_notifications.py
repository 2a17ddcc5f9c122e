"""Change notifications on real sidecars: ``/events`` and ``/leader?wait=`` (contract §4).

An application subscribes the way docs/application.md shows and is told of a handover
within milliseconds, the stopping leader's stream says "not leader" before its
successor's says "leader", and the waiting requests stay within the status
server's bounds.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests import accounts
from tests.cluster import ControlPlane, host
from tests.sidecar.proc import SidecarProcess, _parse, wait_for
from tests.sidecar.subscriber import EventStream, long_poll

Spawn = Callable[..., SidecarProcess]
MAX_WAITERS = 16  # contract §4


def test_a_subscriber_is_told_of_the_handover_and_the_old_leader_says_so_first(
    spawn: Spawn,
) -> None:
    a = spawn("pod-a")
    wait_for(a.leads, 20, what="pod-a to lead")
    b = spawn("pod-b")
    wait_for(lambda: (b.state() or {}).get("holder") == "pod-a", 20, what="pod-b to follow")
    on_a, on_b = EventStream(a.port), EventStream(b.port)
    wait_for(lambda: on_a.events and on_b.events, 10, what="each stream's first event")
    assert (on_a.status, on_a.content_type) == (200, "text/event-stream")
    assert on_a.events[0].state["is_leader"] and not on_b.events[0].state["is_leader"]
    a_token = on_a.events[0].state["fencing_token"]

    a.signal(signal.SIGTERM)
    told = wait_for(lambda: on_b.first(lambda s: s["is_leader"]), 15, what="pod-b's app told")
    assert a.wait(20) == 0
    assert on_a.ended.wait(5), "pod-a's stream did not end when pod-a stopped"
    assert not on_a.error, on_a.error

    stepped_down = on_a.first(lambda s: not s["is_leader"])
    assert stepped_down is not None and on_a.events[-1].state["is_leader"] is False
    # The old leader's "not leader" was written before the successor's "leader", and it
    # reached its app first (contract §4: sent before the release).
    assert _parse(stepped_down.state["updated_at"]) < _parse(told.state["updated_at"])
    assert stepped_down.at < told.at, (stepped_down.at, told.at)
    assert told.state["fencing_token"] > a_token
    # Told within a moment of the sidecar publishing it (generous: this is not a benchmark).
    assert told.at - _parse(told.state["updated_at"]) < 1.0
    ids = [int(e.id.rsplit("-", 1)[1]) for e in on_b.events]
    assert ids == sorted(set(ids)), ids


def test_a_long_poll_answers_at_the_change_and_304_when_nothing_changed(
    spawn: Spawn, cluster: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    # A sidecar whose API server never answers: its state never changes.
    down = accounts.kubeconfig(
        tmp_path / "down.kubeconfig", "https://127.0.0.1:1", cluster.ca_file, {"token": "x"}
    )
    still = spawn("pod-still", kubeconfig=down)
    first = wait_for(lambda: still.http("/leader")[0] == 503 and long_poll(still.port, "0s"), 20)
    assert first.status == 503 and first.etag.startswith('"'), first
    same = long_poll(still.port, "1s", first.etag)
    assert (same.status, same.etag, same.body) == (304, first.etag, "")
    assert 0.9 < same.seconds < 5, same.seconds
    unconditional = long_poll(still.port, "1s")
    assert (unconditional.status, unconditional.etag) == (503, first.etag)
    assert 0.9 < unconditional.seconds < 5
    # An ETag from another process (a restarted sidecar) is answered at once.
    other = long_poll(still.port, "30s", '"00000000-' + first.etag.rsplit("-", 1)[1])
    assert other.status == 503 and other.seconds < 1

    a = spawn("pod-a")
    wait_for(a.leads, 20, what="pod-a to lead")
    b = spawn("pod-b")
    wait_for(lambda: (b.state() or {}).get("holder") == "pod-a", 20, what="pod-b to follow")
    answer = long_poll(b.port, "0s")
    # pod-a renews every second: no change to pod-b (issue 28 item 3), whose /status has it.
    quiet = long_poll(b.port, "3s", answer.etag)
    assert (quiet.status, quiet.etag) == (304, answer.etag) and quiet.seconds > 2.9, quiet
    assert b.http("/status")[1]["renewed_at"] > b.state()["renewed_at"]  # type: ignore[index]
    stop = threading.Timer(0.5, a.signal, (signal.SIGTERM,))
    stop.start()
    polls = 0
    while answer.status != 200:  # the app's loop: each answer carries the next ETag
        sent = answer.etag
        answer = long_poll(b.port, "30s", sent)
        polls += 1
        assert answer.etag != sent or answer.status == 304, answer
        assert polls < 50, "pod-b never answered 200"
    assert answer.state is not None and answer.state["is_leader"]
    assert time.time() - _parse(answer.state["updated_at"]) < 1.0
    assert a.wait(20) == 0


def test_waiting_requests_are_bounded_and_probes_still_answer(spawn: Spawn) -> None:
    a = spawn("pod-a")
    wait_for(a.leads, 20, what="pod-a to lead")
    streams = [EventStream(a.port) for _ in range(MAX_WAITERS)]
    wait_for(lambda: all(s.events for s in streams), 10, what="every stream's first event")

    refused = EventStream(a.port)
    assert refused.ended.wait(5) and refused.status == 429 and not refused.events
    poll = long_poll(a.port, "30s")
    assert poll.status == 429 and "too many waiting requests" in poll.body, poll
    start = time.monotonic()
    assert a.http("/leader")[0] == 200 and a.http("/healthz")[0] == 200
    assert time.monotonic() - start < 2

    for bad, why in (("banana", "is not a duration"), ("10m", "longer than 300s")):
        answer = long_poll(a.port, bad)
        assert answer.status == 400 and why in answer.body and answer.body.count("\n") == 1, answer

    # A subscriber that connects and never reads does not keep the others waiting.
    with socket.create_connection(("127.0.0.1", a.port)) as silent:
        silent.sendall(b"GET /events HTTP/1.1\r\nHost: x\r\n\r\n")
        a.signal(signal.SIGTERM)
        assert a.wait(20) == 0
    assert all(s.ended.wait(5) for s in streams), "a stream outlived the sidecar"
    assert all(not s.events[-1].state["is_leader"] for s in streams)
    assert "Traceback" not in a.raw_log()


EXAMPLES = Path(__file__).resolve().parents[2] / "manifests" / "examples"
WATCHERS = {
    "shell": ["sh", str(EXAMPLES / "watch-leader.sh")],
    "python": [sys.executable, str(EXAMPLES / "watch_leader.py")],
    "go": ["go", "run", str(EXAMPLES / "watch-leader.go")],
}


@pytest.mark.parametrize("language", list(WATCHERS))
def test_readme_watch_examples_follow_leadership_both_ways(
    spawn: Spawn, tmp_path: Path, language: str
) -> None:
    if language == "shell":
        host.ensure_packages({"curl": "/usr/bin/curl"})
    a = spawn("pod-a")
    wait_for(a.leads, 20, what="pod-a to lead")
    out = tmp_path / f"{language}.out"
    env = {**os.environ, "LEADER_ELECTION_URL": f"http://127.0.0.1:{a.port}/leader"}
    with open(out, "wb") as sink:
        # A group of its own: `go run` starts the compiled watcher as its child, which
        # killing `go` alone left running after the tests (found idle, hours later).
        watcher = subprocess.Popen(
            WATCHERS[language], stdout=sink, stderr=sink, env=env, start_new_session=True
        )
    try:
        token = a.state()["fencing_token"]  # type: ignore[index]
        lines = lambda: out.read_text().splitlines()  # noqa: E731
        # `go run` compiles first: a generous bound for the first line.
        wait_for(lambda: f"leading (fencing token {token})" in lines(), 120, what="leading")
        a.signal(signal.SIGTERM)
        wait_for(lambda: lines()[-1:] == ["not leading"], 10, what="not leading")
        assert a.wait(20) == 0
        assert lines() == [f"leading (fencing token {token})", "not leading"], out.read_text()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(watcher.pid, signal.SIGKILL)
        watcher.wait()


def test_an_idle_stream_gets_a_keep_alive_comment_after_15_seconds(
    spawn: Spawn, cluster: ControlPlane, tmp_path: Path
) -> None:
    """Contract §4: a proxy between app and sidecar must not time out a quiet stream.

    A sidecar that cannot reach its API server publishes nothing new, so its
    stream is idle from the first event on.
    """
    unreachable = accounts.kubeconfig(
        tmp_path / "down.kubeconfig", "https://127.0.0.1:1", cluster.ca_file, {"token": "x"}
    )
    a = spawn("pod-a", kubeconfig=unreachable)
    wait_for(lambda: a.http("/healthz")[0] == 200, 30, what="the status port")
    with socket.create_connection(("127.0.0.1", a.port), timeout=30) as conn:
        conn.sendall(b"GET /events HTTP/1.1\r\nHost: x\r\n\r\n")
        received = b""
        started = time.monotonic()
        while b": keep-alive" not in received:
            chunk = conn.recv(4096)
            assert chunk, received
            received += chunk
        idle = time.monotonic() - started
    assert received.count(b"data: ") == 1, received  # the current state, then only the comment
    assert 14 < idle < 20, idle
