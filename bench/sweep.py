"""What shutdown sweeps cost the API server when many pods stop at once (issue 15, item 2).

Not a test (``tests/unit/test_driver.py`` asserts the behaviour); this reports
the numbers. On the embedded control plane: a namespace with ``--leases``
managed Leases abandoned an hour ago, ``--pods`` sidecars of one election
started together, left running until a sweep may confirm those Leases
abandoned (lease duration + the 60 s margin), then all SIGTERMed at once, the
way a rollout or a scale-down stops them. From the API server's audit log:
the sweep's LISTs (by label), its DELETEs, and the requests on the sweep duty
Lease, at start and at exit; from its metrics, the bytes of every Lease LIST
answer (the sweep's, and the election's own small reads by name).

It measures an older ``sidecar`` package first, for a before/after in one
run: ``BASELINE``'s (by ``git archive``), or the one found under ``--old PATH``:

    .venv/bin/python -m bench.sweep [--pods 50] [--leases 1000] [--old /tmp/old]

A full ``python -m bench`` calls :func:`before_after` on its own control plane,
so the numbers land in ``RESULTS.md`` from the same run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sidecar.core.lease import format_microtime
from tests.cluster import ControlPlane
from tests.sidecar.proc import SidecarProcess, wait_for

RESULTS = Path(__file__).parent / "results" / "sweep.json"
ROOT = Path(__file__).resolve().parent.parent
LEASES = 1000  # managed Leases abandoned in the namespace
BASELINE = "b3113d0"  # every sidecar lists its namespace at start and sweeps it at exit
SELECTOR = "app.kubernetes.io%2Fmanaged-by%3Dgrelmicro"
TIMING = ("--lease-duration=3s", "--renew-deadline=2s", "--retry-period=500ms")


def abandoned_leases(plane: ControlPlane, namespace: str, count: int) -> None:
    """``count`` managed Leases last renewed an hour ago, for one second: long abandoned."""
    stamp = format_microtime(dt.datetime.now(dt.UTC) - dt.timedelta(hours=1))
    items = [
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": f"leader-gone-{i:04d}",
                "labels": {"app.kubernetes.io/managed-by": "grelmicro"},
            },
            "spec": {
                "holderIdentity": f"gone-{i}",
                "leaseDurationSeconds": 1,
                "acquireTime": stamp,
                "renewTime": stamp,
                "leaseTransitions": 0,
            },
        }
        for i in range(count)
    ]
    doc = json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    plane.kubectl("create", "-n", namespace, "-f", "-", input=doc)


def lease_list_bytes(plane: ControlPlane) -> float:
    """Sum of the sizes of every Lease LIST answer so far (apiserver_response_sizes)."""
    _, body = plane.get("/metrics")
    total = 0.0
    for line in body.decode().splitlines():
        wanted = 'resource="leases"' in line and 'verb="LIST"' in line
        if line.startswith("apiserver_response_sizes_sum{") and wanted:
            total += float(line.rsplit(" ", 1)[1])
    return total


def count_requests(plane: ControlPlane, namespace: str, since: str, until: str) -> dict[str, int]:
    """The sweep's requests in [since, until) from the audit log (stageTimestamp, RFC 3339)."""
    counts = {"sweep_lists": 0, "deletes": 0, "deletes_ok": 0, "duty": 0}
    for event in plane.audit_events():
        ref = event.get("objectRef") or {}
        if event.get("stage") != "ResponseComplete" or ref.get("namespace") != namespace:
            continue
        if ref.get("resource") != "leases" or not since <= event["stageTimestamp"] < until:
            continue
        verb, uri = event.get("verb"), event.get("requestURI", "")
        code = (event.get("responseStatus") or {}).get("code", 0)
        if verb == "list" and SELECTOR in uri:
            counts["sweep_lists"] += 1
        elif verb == "delete":
            counts["deletes"] += 1
            counts["deletes_ok"] += code == 200
        elif ref.get("name") == "grelmicro-sidecar-sweeper":
            counts["duty"] += 1
    return counts


def stamp() -> str:
    return format_microtime(dt.datetime.now(dt.UTC))


def one_run(
    plane: ControlPlane, tmp: Path, label: str, pods: int, leases: int, old: str | None
) -> dict[str, Any]:
    namespace = f"sweep-{label}"
    plane.kubectl("create", "namespace", namespace)
    abandoned_leases(plane, namespace, leases)
    env = {"PYTHONPATH": old} if old else {}
    procs = [
        SidecarProcess(tmp / label, plane.kubeconfig, namespace, f"pod-{i}", extra=TIMING, env=env)
        for i in range(pods)
    ]
    (tmp / label).mkdir(parents=True)
    started = stamp()
    bytes_at_start = lease_list_bytes(plane)
    for proc in procs:
        proc.start()
    try:
        wait_for(lambda: any(p.leads() for p in procs), 120, what="a leader")
    except AssertionError as err:
        try:
            log = procs[0].log_path.read_text(errors="replace").strip().splitlines()[-2:]
        except OSError as why:
            log = [str(why)]
        for proc in procs:
            proc.stop()
        raise AssertionError(f"{err}; {procs[0].identity}'s last log lines: {log}") from None
    time.sleep(70)  # the abandoned Leases' 1 s + the sweep's 60 s margin, seen unchanged
    stopping = stamp()
    bytes_before_stop = lease_list_bytes(plane)
    began = time.monotonic()
    for proc in procs:
        proc.signal(signal.SIGTERM)
    codes = [proc.wait(60) for proc in procs]
    took = time.monotonic() - began
    time.sleep(1)  # the audit log's last lines
    ended = stamp()
    left = plane.kubectl(
        "get",
        "leases",
        "-n",
        namespace,
        "-l",
        "app.kubernetes.io/managed-by=grelmicro",
        "-o",
        "name",
    ).stdout.split()
    result = {
        "pods": pods,
        "leases": leases,
        "start": count_requests(plane, namespace, started, stopping),
        "stop": count_requests(plane, namespace, stopping, ended),
        "list_bytes_start": bytes_before_stop - bytes_at_start,
        "list_bytes_stop": lease_list_bytes(plane) - bytes_before_stop,
        "abandoned_left": sum(1 for n in left if re.search(r"leader-gone-", n)),
        "exit_codes": sorted(set(codes)),
        "stop_seconds": round(took, 2),
    }
    for proc in procs:
        proc.stop()
    return result


def baseline_package(into: Path) -> str | None:
    """``BASELINE``'s ``sidecar`` package under ``into``, or why it could not be had."""
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", BASELINE, "sidecar"], capture_output=True, check=False
    )
    if archive.returncode:
        return f"git archive {BASELINE} failed ({archive.stderr.decode().strip()[:120]})"
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return None


def before_after(
    plane: ControlPlane, tmp: Path, pods: int, leases: int, old: Path | None = None
) -> dict[str, Any]:
    """An older package (``old``, else BASELINE's), then this tree, on one control plane.

    A baseline that cannot be had is reported, not hidden.
    """
    out: dict[str, Any] = {"baseline": str(old) if old else BASELINE}
    if old is None:
        old = tmp / "baseline"
        gap = baseline_package(old)
        if gap:
            out["gap_before"] = gap
    if "gap_before" not in out:
        _say(f"before: {pods} pods, {leases} leases")
        try:
            out["before"] = one_run(plane, tmp, "before", pods, leases, str(old))
        except AssertionError as err:  # the baseline's failure is reported, the run goes on
            out["gap_before"] = f"the baseline run failed: {err}"
    _say(f"after: {pods} pods, {leases} leases")
    out["after"] = one_run(plane, tmp, "after", pods, leases, None)
    return out


def _say(msg: str) -> None:
    print(f"[bench.sweep] {msg}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sweep")
    parser.add_argument("--pods", type=int, default=50)
    parser.add_argument("--leases", type=int, default=LEASES)
    parser.add_argument(
        "--old",
        help=f"a directory holding the older sidecar package measured first (default: {BASELINE}'s)",
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="grelmicro-sweep-") as tmp:
        plane = ControlPlane(Path(tmp) / "controlplane")
        plane.start()
        try:
            old = Path(args.old) if args.old else None
            results = before_after(plane, Path(tmp), args.pods, args.leases, old)
        finally:
            plane.stop()
            plane.remove()
    from bench.provenance import machine, source

    out = {"source": source(), "machine": machine(), "runs": results}
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
