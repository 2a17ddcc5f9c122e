"""A flood on the status port: the sidecar's RSS and the kubelet probe's latency under it.

Not a test (tests/badinput/test_status_port.py asserts the behaviour with
generous bounds); this reports the numbers. One leading sidecar on the embedded
control plane; for each flood size it opens that many connections that each
send half a request and then sit idle (what a slow or hostile client does),
times ``GET /leader`` from fresh connections while they are open, and reads
the sidecar's VmRSS. ``--source DIR`` runs the sidecar from another checkout's
``sidecar/`` package (e.g. ``git archive`` of an older commit) for a
before/after comparison in the same run.

    .venv/bin/python -m bench.flood [--sizes 0,1000,5000] [--source DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.cluster import ControlPlane
from tests.sidecar.proc import SidecarProcess, wait_for

from .harness import rss_mb

HALF_SENT = b"GET /leader HTTP/1.1\r\nHost: flood\r\n"
PROBES = 50
RESULTS = Path(__file__).parent / "results" / "flood.json"


def _probe(port: int) -> float | None:
    """Seconds for one ``GET /leader`` on a fresh connection, as the kubelet does; None if it failed."""
    started = time.perf_counter()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
            conn.sendall(b"GET /leader HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n")
            head = conn.recv(64)
    except OSError:
        return None
    return time.perf_counter() - started if head.startswith(b"HTTP/1.1 200") else None


def _flood(port: int, size: int) -> list[socket.socket]:
    conns = []
    for _ in range(size):
        try:
            conn = socket.create_connection(("127.0.0.1", port), timeout=5)
            conn.sendall(HALF_SENT)
        except OSError:
            continue
        conns.append(conn)
    return conns


def measure(sidecar: SidecarProcess, size: int) -> dict[str, Any]:
    assert sidecar.proc is not None
    flood = _flood(sidecar.port, size)
    try:
        time.sleep(1.0)
        latencies = [_probe(sidecar.port) for _ in range(PROBES)]
        rss = rss_mb(sidecar.proc.pid)
    finally:
        for conn in flood:
            conn.close()
    answered = sorted(t for t in latencies if t is not None)
    return {
        "connections": size,
        "opened": len(flood),
        "rss_mb": rss,
        "probes": PROBES,
        "probes_failed": PROBES - len(answered),
        "probe_p50_ms": round(statistics.median(answered) * 1000, 2) if answered else None,
        "probe_max_ms": round(answered[-1] * 1000, 2) if answered else None,
        "still_leads": sidecar.leads(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.flood", description=__doc__)
    parser.add_argument("--sizes", default="0,1000,5000", help="flood sizes, comma-separated")
    parser.add_argument("--source", type=Path, help="a directory holding another sidecar/ package")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(sizes) + 1024), hard))
    env = {"PYTHONPATH": str(args.source.resolve())} if args.source else None
    with tempfile.TemporaryDirectory(prefix="grelmicro-flood-") as tmp:
        plane = ControlPlane(Path(tmp) / "controlplane")
        plane.start()
        sidecar = SidecarProcess(Path(tmp), plane.kubeconfig, "default", "flood-0", env=env)
        try:
            sidecar.start()
            wait_for(sidecar.leads, 30, what="leadership")
            rows = []
            for size in sizes:
                rows.append(measure(sidecar, size))
                time.sleep(6.0)  # idle connections closed on both sides before the next size
                print(json.dumps(rows[-1]), flush=True)
        finally:
            with contextlib.suppress(Exception):
                sidecar.stop()
            plane.stop()
    result = {"source": str(args.source or "this checkout"), "rows": rows}
    if args.source is None:
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"{'connections':>11} {'RSS MiB':>8} {'probe p50 ms':>12} {'max ms':>8} {'failed':>6} leads"
    )
    for r in rows:
        print(
            f"{r['connections']:>11} {r['rss_mb']:>8.1f} {r['probe_p50_ms']!s:>12} "
            f"{r['probe_max_ms']!s:>8} {r['probes_failed']:>6} {r['still_leads']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
