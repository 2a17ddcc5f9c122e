"""How long after a handover the new leader's application is told, for each way it can listen.

Not a test (tests/sidecar/test_notifications.py asserts the behaviour with
generous bounds); this reports the numbers. Three sidecars in one election on
the embedded control plane; every round SIGTERMs the leader, and on each
follower four "applications" listen at once, the way docs/application.md shows:

- ``events``: the ``/events`` stream (Server-Sent Events);
- ``long-poll``: ``GET /leader?wait=5s`` with the last ETag;
- ``poll-http-1s``: ``GET /leader`` every second (what a loop without
  notifications does; manifests/examples/leader-only-work.sh uses 10 s);
- ``poll-file-1s``: reading state.json every second.

For the successor, each one's delay is measured from the moment its sidecar
published leadership (``updated_at`` of its first leader state: notification
cost alone) and from the SIGTERM (what the application feels: shutdown,
release, watch, claim, notification). Same host, same wall clock.

    .venv/bin/python -m bench.notify [--rounds 20]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.cluster import ControlPlane
from tests.sidecar.proc import SidecarProcess, _parse, read_state, wait_for
from tests.sidecar.subscriber import EventStream, long_poll

RESULTS = Path(__file__).parent / "results" / "notify.json"
WAYS = ("events", "long-poll", "poll-http-1s", "poll-file-1s")


class Listener:
    """One application on one follower: the first time it learned that its pod leads."""

    def __init__(self, way: str, sidecar: SidecarProcess):
        self.way, self.sidecar = way, sidecar
        self.told: tuple[float, dict[str, Any]] | None = None
        self.stop = threading.Event()
        self.stream = EventStream(sidecar.port) if way == "events" else None
        if self.stream is None:
            threading.Thread(target=self._run, daemon=True).start()

    def seen(self) -> tuple[float, dict[str, Any]] | None:
        if self.stream is not None:
            first = self.stream.first(lambda s: s["is_leader"])
            return (first.at, first.state) if first else None
        return self.told

    def _run(self) -> None:
        poll: Callable[[], dict[str, Any] | None]
        if self.way == "long-poll":
            etag: list[str | None] = [None]

            def poll() -> dict[str, Any] | None:
                with contextlib.suppress(OSError):
                    answer = long_poll(self.sidecar.port, "5s", etag[0], timeout=10)
                    if answer.status != 304:
                        etag[0] = answer.etag
                        return answer.state
                return None

            pause = 0.0
        elif self.way == "poll-http-1s":

            def poll() -> dict[str, Any] | None:
                _, body = self.sidecar.http("/leader")
                return body if isinstance(body, dict) else None

            pause = 1.0
        else:

            def poll() -> dict[str, Any] | None:
                return read_state(self.sidecar.state_dir)

            pause = 1.0
        time.sleep(random.uniform(0, pause))  # pollers are not in phase with anything
        while not self.stop.is_set() and self.told is None:
            state = poll()
            if state and state.get("is_leader"):
                self.told = (time.time(), state)
            self.stop.wait(pause)

    def close(self) -> None:
        self.stop.set()
        if self.stream is not None:
            self.stream.close()


def _leader(procs: list[SidecarProcess]) -> SidecarProcess:
    return wait_for(lambda: next((p for p in procs if p.leads()), None), 30, what="a leader")  # type: ignore[no-any-return]


def one_round(procs: list[SidecarProcess]) -> dict[str, Any]:
    leader = _leader(procs)
    followers = [p for p in procs if p is not leader]
    for f in followers:
        wait_for(lambda f=f: (f.state() or {}).get("holder") == leader.identity, 30, what="follow")
    listeners = {(f.identity, way): Listener(way, f) for f in followers for way in WAYS}
    time.sleep(1.5)  # every listener connected or in its polling rhythm
    sigterm = time.time()
    leader.signal(signal.SIGTERM)
    successor = _leader(followers)
    wait_for(
        lambda: all(listeners[(successor.identity, w)].seen() for w in WAYS), 10, what="all told"
    )
    # The stream sends every version: its first leader state is the one first published.
    first = listeners[(successor.identity, "events")].seen()
    assert first is not None
    published = _parse(first[1]["updated_at"])
    row: dict[str, Any] = {"successor": successor.identity}
    for way in WAYS:
        told = listeners[(successor.identity, way)].seen()
        assert told is not None
        row[way] = {
            "after_publish_ms": (told[0] - published) * 1000,
            "after_sigterm_ms": (told[0] - sigterm) * 1000,
        }
    for listener in listeners.values():
        listener.close()
    assert leader.wait(20) == 0
    leader.start()  # back as a follower for the next round
    return row


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for way in WAYS:
        for key in ("after_publish_ms", "after_sigterm_ms"):
            values = sorted(r[way][key] for r in rows)
            out.setdefault(way, {})[key] = {
                "p50": round(statistics.median(values), 1),
                "max": round(values[-1], 1),
            }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.notify", description=__doc__)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="grelmicro-notify-") as tmp:
        plane = ControlPlane(Path(tmp) / "controlplane")
        plane.start()
        procs = [
            SidecarProcess(Path(tmp), plane.kubeconfig, "default", f"pod-{i}") for i in range(3)
        ]
        rows = []
        try:
            for p in procs:
                p.start()
            for i in range(args.rounds):
                rows.append(one_round(procs))
                print(json.dumps({"round": i + 1, **rows[-1]}), flush=True)
        finally:
            for p in procs:
                with contextlib.suppress(Exception):
                    p.stop()
            plane.stop()
    summary = summarize(rows)
    RESULTS.write_text(
        json.dumps({"rounds": len(rows), "summary": summary, "rows": rows}, indent=2) + "\n"
    )
    print(f"\n{len(rows)} handovers; the successor's application told, ms (p50 / max)")
    print(f"{'way':<14} {'after its sidecar published':>28} {'after the SIGTERM':>20}")
    for way in WAYS:
        pub, term = summary[way]["after_publish_ms"], summary[way]["after_sigterm_ms"]
        print(f"{way:<14} {pub['p50']:>14} / {pub['max']:<11} {term['p50']:>9} / {term['max']:<8}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
