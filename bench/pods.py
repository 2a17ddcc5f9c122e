"""``python -m bench.pods``: the product in real pods on this machine's node, measured.

What a user feels, on the node of ``tests/cluster/node.py`` with the image
built from the Dockerfile and the chart installed:

- node start (kubelet to Ready, CoreDNS answering) and the image's size;
- for each way of electing a leader (``bench/podpeers.py``: the sidecar, the
  sidecar with the leader label, client-go with ``ReleaseOnCancel`` as a
  sidecar, grelmicro inside the app), one 3-replica Deployment, in the same run:
  - create -> first leader, and the election process's RSS in each pod;
  - leaderless time on ``kubectl delete pod`` of the leader, ``--rounds``
    times: from the Lease's release (holder emptied, handed off, or the Lease
    deleted) to the successor's claim, both seen by a watch on the Lease; and
    delete -> successor;
  - leaderless time per ``kubectl rollout restart`` (default strategy,
    readiness not gated), summed over the handovers the rollout causes;
  - for the sidecar's workloads, whose app acts only while the state file says
    so (``bench/apppause.py``): the longest pause of the leader's app within one
    term per rollout, in the steady seconds before and per pod deletion, each
    pause over 100 ms put down to its cause, with the node's CPU pressure
    (``/proc/pressure/cpu``) over the same window;
- the leader Service (``manifests/examples/leader-service.yaml``, 3 replicas,
  the leader label): per ``kubectl delete pod`` of the leader and per rollout,
  how long the Service had no ready endpoint, and how long after the Lease
  named the new leader the Service routed to it alone (sampled every 50 ms:
  EndpointSlices, labels and the Lease, through the API).

Writes ``bench/results/pods.json`` and ``bench/PODS.md``. Numbers only: the
behaviour is asserted by ``tests/e2e``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch

from bench import apppause, cpuuse, podpeers
from sidecar.core.lease import HANDOFF_ANNOTATION
from tests.cluster import images
from tests.cluster.node import Node
from tests.e2e.conftest import CHART, ROOT, Cluster, wait_for
from tests.e2e.test_leader_service import Sampler, follow_time, longest

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "pods.json"
REPORT = HERE / "PODS.md"
NS = "bench"


def _log(msg: str) -> None:
    print(f"[bench.pods] {msg}", file=sys.stderr, flush=True)


class LeaseWatch:
    """Every change of one Lease's leadership, timestamped on arrival (a watch in a thread).

    Recorded as (time, holder) with holder ``""`` while nobody leads: the holder
    emptied (a release), the Lease deleted (grelmicro's release), or handed off
    (a release naming its successor, contract §2: the successor leads only once
    its own claim is written).
    """

    def __init__(self, cluster: Cluster, namespace: str, name: str) -> None:
        self.api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
        self.namespace, self.name = namespace, name
        self.changes: list[tuple[float, str]] = []
        #: Holder changes with no release between them (a takeover, not a handover)
        self.unreleased = 0
        self._watch = watch.Watch()
        self._stopped = False
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        leases = client.CoordinationV1Api(self.api)
        while not self._stopped:
            try:
                for event in self._watch.stream(
                    leases.list_namespaced_lease,
                    self.namespace,
                    field_selector=f"metadata.name={self.name}",
                    timeout_seconds=300,
                ):
                    self._record(event["type"], event["object"])
            except Exception as err:
                if not self._stopped:
                    _log(f"lease watch {self.namespace}/{self.name}: {err}; re-opening")
                    time.sleep(0.2)

    def _record(self, kind: str, lease: Any) -> None:
        now = time.time()
        holder = (lease.spec.holder_identity if lease.spec else None) or ""
        if kind == "DELETED" or HANDOFF_ANNOTATION in (lease.metadata.annotations or {}):
            holder = ""
        last = self.changes[-1][1] if self.changes else None
        if holder == last:
            return
        if last and holder:
            self.unreleased += 1
        self.changes.append((now, holder))

    def holder(self) -> str:
        """Who leads now, by the Lease ("" while nobody does)."""
        return self.changes[-1][1] if self.changes else ""

    def since(self, t: float) -> list[tuple[float, str]]:
        return [c for c in self.changes if c[0] >= t]

    def stop(self) -> None:
        self._stopped = True
        self._watch.stop()
        self.api.close()


class SidecarLog:
    """The sidecar container's log of one pod, followed from now (``kubectl logs -f``)."""

    def __init__(self, cluster: Cluster, namespace: str, pod: str) -> None:
        self.proc = subprocess.Popen(
            cluster.command("logs", "-f", "-n", namespace, pod, "-c", "grelmicro-sidecar"),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.lines: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()
        time.sleep(0.3)  # attached before the pod is deleted

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        self.lines.extend(self.proc.stdout)

    def stop_times(self) -> tuple[float | None, float | None]:
        """When the sidecar logged 'shutting down' (its SIGTERM) and 'released lease' (epoch s)."""
        time.sleep(0.5)
        self.proc.terminate()
        self.proc.wait(10)
        found: dict[str, float] = {}
        for line in self.lines:
            try:
                record = json.loads(line)
                at = datetime.fromisoformat(record["ts"].replace("Z", "+00:00")).timestamp()
            except (ValueError, KeyError, TypeError):
                continue
            found.setdefault(str(record.get("msg")), at)
        return found.get("shutting down"), found.get("released lease")


def logged(cluster: Cluster, namespace: str, pod: str, msg: str) -> dict[str, Any] | None:
    """The first record of the pod's sidecar log so far whose message is ``msg``."""
    out = cluster.kubectl("logs", "-n", namespace, pod, "-c", "grelmicro-sidecar", check=False)
    for line in out.stdout.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("msg") == msg and "ts" in record:
            return record
    return None


def gaps(changes: list[tuple[float, str]], start: float) -> list[float]:
    """Leaderless intervals: from a release to the next holder's claim."""
    out, cleared = [], None
    for t, holder in changes:
        if not holder:
            cleared = t
        elif cleared is not None:
            out.append(t - cleared)
            cleared = None
    return out


def election_processes(
    needles: tuple[bytes, ...], pod_uids: set[str]
) -> Iterator[tuple[Path, str]]:
    """(``/proc/<pid>``, pod uid) of every process of these pods whose command line holds
    all of ``needles``.

    The pod is told by the process's cgroup (``.../pod<uid>/...``, cgroupfs): a
    command line alone also matched the sidecars injected into every other pod
    still running on the node (17 values for a 3-replica workload in one run).
    """
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if not all(n in (proc / "cmdline").read_bytes() for n in needles):
                continue
            cgroups = (proc / "cgroup").read_text()
        except OSError:
            continue
        uid = next((u for u in pod_uids if f"pod{u}" in cgroups), None)
        if uid is not None:
            yield proc, uid


def process_rss_mib(needles: tuple[bytes, ...], pod_uids: set[str]) -> list[float]:
    """VmRSS of each election process of these pods."""
    found = []
    for proc, _uid in election_processes(needles, pod_uids):
        try:
            status = (proc / "status").read_text()
        except OSError:
            continue
        rss = [line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")]
        found += [round(int(kb) / 1024, 1) for kb in rss]
    return found


def process_starts(needles: tuple[bytes, ...], pod_uids: set[str]) -> dict[str, float]:
    """When each of these pods' election process started (wall clock; by pod uid, the earliest).

    From ``/proc/<pid>/stat``'s start time, in clock ticks since boot (10 ms),
    put on the wall clock through ``CLOCK_BOOTTIME``: what the pod's start cost
    before the process ran, and what the process took to claim, told apart.
    """
    tick = os.sysconf("SC_CLK_TCK")
    boot_to_wall = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
    found: dict[str, float] = {}
    for proc, uid in election_processes(needles, pod_uids):
        try:
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        started = int(stat.rsplit(")", 1)[1].split()[19]) / tick + boot_to_wall
        found[uid] = min(started, found.get(uid, started))
    return found


#: How each workload's election process is recognised on the node, for its RSS.
PROCESS = {
    "sidecar": (b"grelmicro-sidecar\0run",),
    "clientgo": (b"clientgo-peer",),
    "grelmicro": (b"pypeer.py\0grelmicro",),
}


def summary(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50": round(statistics.median(values), 3) if values else float("nan"),
        "max": round(max(values), 3) if values else float("nan"),
    }


def live_pods(cluster: Cluster, namespace: str) -> set[str]:
    items = cluster.json("get", "pods", "-n", namespace)["items"]
    return {
        p["metadata"]["name"]
        for p in items
        if not p["metadata"].get("deletionTimestamp") and p["status"].get("phase") == "Running"
    }


def cpu_stalled() -> float:
    """Seconds, since boot, that some runnable task on this machine waited for a CPU (PSI)."""
    try:
        line = Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except (OSError, IndexError):
        return float("nan")
    return int(line.rsplit("total=", 1)[1]) / 1e6


class AppWindows:
    """The app's pauses, window by window, for a workload whose app is ``bench/apppause.py``."""

    def __init__(self, pod_logs: Path | None, namespace: str) -> None:
        self.logs = apppause.AppLogs(pod_logs, namespace) if pod_logs else None
        self.windows: dict[str, list[dict[str, Any]]] = {}
        self._open: tuple[float, float, cpuuse.CpuUse] | None = None

    def begin(self) -> None:
        if self.logs is not None:
            self._open = (time.time(), cpu_stalled(), cpuuse.CpuUse())

    def end(self, kind: str) -> dict[str, Any] | None:
        if self.logs is None or self._open is None:
            return None
        start, stalled, use = self._open
        time.sleep(0.5)  # the apps' last lines reach their log files
        end = time.time()
        found = apppause.window(self.logs.between(start, end))
        found["seconds"] = round(end - start, 2)
        found["cpu_pressure"] = round((cpu_stalled() - stalled) / (end - start), 3)
        found["cpu_seconds"] = use.stop()
        self.windows.setdefault(kind, []).append(found)
        return found

    def stop(self) -> dict[str, Any]:
        if self.logs is not None:
            self.logs.stop()
        return self.windows


#: A process that keeps one CPU busy, as other work sharing the machine does.
HOG = [sys.executable, "-c", "while True: pass"]
#: The busy processes running, ended when their workload is done or the run fails.
_hogs: list[subprocess.Popen[bytes]] = []


def _end_hogs() -> None:
    while _hogs:
        hog = _hogs.pop()
        hog.kill()
        hog.wait()


def run(
    rounds: int,
    rollouts: int,
    only: set[str] | None = None,
    app_cpu_request: str | None = None,
    cpu_load: int = 0,
) -> dict[str, Any]:
    node = Node(Path(tempfile.mkdtemp(prefix="grelmicro-bench-node-")))
    res: dict[str, Any] = {"started": datetime.now().isoformat(timespec="seconds")}
    try:
        node.start()
        res["node_ready_s"] = round(node.timings["node_ready"], 2)
        res["node_and_dns_ready_s"] = round(node.timings["ready"], 2)
        cluster = Cluster(node.kubeconfig)
        archives = images.product_images()
        node.load_images(archives + podpeers.peer_images())
        res["image_bytes"] = images.image_size(archives[0])
        t0 = time.monotonic()
        cluster.helm(
            "install", "gs", str(CHART), "-n", "grelmicro-system", "--create-namespace", "--wait"
        )
        res["helm_install_wait_s"] = round(time.monotonic() - t0, 2)
        res["workloads"] = {}
        for workload in podpeers.workloads(NS, app_cpu_request):
            if only and workload.key not in only:
                continue
            res["workloads"][workload.key] = measure(
                cluster, workload, rounds, rollouts, node.run / "pod-logs", cpu_load
            )
            if workload.key.startswith("sidecar"):
                res["workloads"][workload.key]["app_cpu_request"] = app_cpu_request
        if not only or "service" in only:
            res.update(leader_service(cluster, rounds, rollouts))
    finally:
        _end_hogs()
        left = node.stop()
        if not left:
            node.remove()
        res["left_behind"] = left
    return res


def measure(
    cluster: Cluster,
    workload: podpeers.Workload,
    rounds: int,
    rollouts: int,
    pod_logs: Path | None = None,
    cpu_load: int = 0,
) -> dict[str, Any]:
    """One workload through ``rounds`` leader pod deletions and ``rollouts`` rollout restarts;
    ``pod_logs``: the kubelet's log directory, where the sidecar workloads' apps are read;
    ``cpu_load``: that many busy processes on the machine from the steady window to the
    last rollout, as other work sharing it would be."""
    ns, out = workload.namespace, dict[str, Any](label=workload.label)
    app = AppWindows(pod_logs if workload.key.startswith("sidecar") else None, ns)
    cluster.kubectl("create", "namespace", ns)
    cluster.kubectl("apply", "-n", ns, "-f", str(ROOT / "manifests" / "rbac.yaml"))
    if workload.key == "sidecar-label":
        cluster.kubectl("apply", "-n", ns, "-f", str(ROOT / "manifests" / "leader-label.yaml"))
    watch = LeaseWatch(cluster, ns, podpeers.LEASE)
    t0, t0_wall = time.monotonic(), time.time()
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(workload.manifest))
    first = wait_for(watch.holder, 120, f"{workload.key}: a leader", interval=0.02)
    out["create_to_leader_s"] = round(time.monotonic() - t0, 2)
    led_wall = next(t for t, h in watch.changes if h)
    cluster.kubectl("rollout", "status", "-n", ns, "deployment/worker", "--timeout=180s")
    _hogs.extend(subprocess.Popen(HOG) for _ in range(cpu_load))
    app.begin()
    time.sleep(10)
    steady = app.end("steady")
    if steady is not None:
        _log(f"{workload.key} steady 10s: {_pauses(steady)}")
    needles = PROCESS.get(workload.key.split("-")[0], ())
    pods = {
        p["metadata"]["name"]: p["metadata"]["uid"]
        for p in cluster.json("get", "pods", "-n", ns)["items"]
    }
    uids = list(pods.values())
    out["rss_mib"] = process_rss_mib(needles, set(uids)) if needles else []
    starts = process_starts(needles, set(uids)) if needles else {}
    if starts:
        out["create_to_process_s"] = round(min(starts.values()) - t0_wall, 2)
    if first in pods and pods[first] in starts:
        started = starts[pods[first]]
        out["leader_process_to_claim_s"] = round(led_wall - started, 2)
        if workload.key.startswith("sidecar"):
            record = logged(cluster, ns, first, "starting")
            if record is not None:
                at = datetime.fromisoformat(record["ts"].replace("Z", "+00:00")).timestamp()
                out["leader_process_to_started_log_s"] = round(at - started, 2)
                out["leader_start_cpu_s"] = record.get("cpu_seconds")

    delete_gap, delete_total, to_sigterm, to_release = [], [], [], []
    for i in range(rounds):
        old = wait_for(
            lambda: watch.holder() in live_pods(cluster, ns) and watch.holder(), 60, "a leader"
        )
        sidecar_log = SidecarLog(cluster, ns, old) if workload.key.startswith("sidecar") else None
        app.begin()
        t = time.time()
        cluster.kubectl("delete", "pod", "-n", ns, old, "--wait=false")
        new = wait_for(
            lambda t=t, old=old: next((h for _, h in watch.since(t) if h and h != old), None),
            90,
            f"{workload.key}: a successor",
            0.02,
        )
        seen = next(ts for ts, h in watch.since(t) if h == new)
        delete_total.append(seen - t)
        delete_gap += gaps(watch.since(t), t)
        split = ""
        if sidecar_log is not None:
            sigterm, released = sidecar_log.stop_times()
            if sigterm is not None and released is not None:
                to_sigterm.append(sigterm - t)
                to_release.append(released - sigterm)
                split = (
                    f" (sidecar SIGTERM +{sigterm - t:.2f}s, released +{released - sigterm:.3f}s)"
                )
        _log(f"{workload.key} delete {i + 1}/{rounds}: {old} -> {new} in {seen - t:.2f}s{split}")
        cluster.kubectl("rollout", "status", "-n", ns, "deployment/worker", "--timeout=180s")
        deleted = app.end("delete")
        if deleted is not None:
            _log(f"{workload.key} delete {i + 1}/{rounds}, the leader's app: {_pauses(deleted)}")
    out["delete_pod_leaderless_s"] = summary(delete_gap)
    out["delete_pod_to_successor_s"] = summary(delete_total)
    if to_sigterm:
        # Where delete -> successor goes: the app's own shutdown (native sidecar order),
        # then the sidecar's, from its log.
        out["delete_pod_to_sidecar_sigterm_s"] = summary(to_sigterm)
        out["sidecar_sigterm_to_release_s"] = summary(to_release)

    rollout_gap: list[float] = []
    handovers: list[int] = []
    for i in range(rollouts):
        app.begin()
        t = time.time()
        cluster.kubectl("rollout", "restart", "-n", ns, "deployment/worker")
        cluster.kubectl("rollout", "status", "-n", ns, "deployment/worker", "--timeout=180s")
        wait_for(lambda: watch.holder() in live_pods(cluster, ns), 90, "a leader after the rollout")
        window = gaps(watch.since(t), t)
        rollout_gap.append(sum(window))
        handovers.append(len(window))
        _log(
            f"{workload.key} rollout {i + 1}/{rollouts}: leaderless {sum(window):.2f}s "
            f"in {len(window)} handover(s)"
        )
        rolled = app.end("rollout")
        if rolled is not None:
            _log(f"{workload.key} rollout {i + 1}/{rollouts}, the leader's app: {_pauses(rolled)}")
    _end_hogs()
    out["cpu_load"] = cpu_load
    out["rollout_restart_leaderless_s"] = summary(rollout_gap)
    out["rollout_handovers"] = summary([float(h) for h in handovers])
    out["takeovers_without_release"] = watch.unreleased
    watch.stop()
    windows = app.stop()
    if windows:
        out["app_pauses"] = windows
        for kind, found in windows.items():
            longest = [w["longest_pause_s"] for w in found]
            out[f"app_{kind}_longest_pause_s"] = summary(longest)
            out[f"app_{kind}_longest_pause_each_s"] = longest
    cluster.kubectl("delete", "namespace", ns, "--wait=false")
    return out


def _pauses(found: dict[str, Any]) -> str:
    causes = ", ".join(f"{k} {v}" for k, v in found["causes"].items() if v) or "none"
    return (
        f"longest same-term pause {found['longest_pause_s']:.3f}s; pauses > 100 ms by cause: "
        f"{causes}; loop late {found['late_lines']}x (max {found['max_late_s']:.3f}s); "
        f"CPU pressure {found['cpu_pressure']:.2f}; CPU s {found['cpu_seconds']}"
    )


def leader_service(cluster: Cluster, rounds: int, rollouts: int) -> dict[str, Any]:
    """The leader label's Service through pod deletions and rollouts (see the module docstring)."""
    ns = "bench-label"
    cluster.kubectl("create", "namespace", ns)
    for manifest in ("rbac.yaml", "leader-label.yaml", "examples/leader-service.yaml"):
        cluster.kubectl("apply", "-n", ns, "-f", str(ROOT / "manifests" / manifest))
    cluster.kubectl("scale", "-n", ns, "deployment/api", "--replicas=3")
    cluster.kubectl("rollout", "status", "-n", ns, "deployment/api", "--timeout=180s")
    unrouted_delete: list[float] = []
    unrouted_rollout: list[float] = []
    follow: list[float] = []
    with Sampler(str(cluster.kubeconfig), ns, interval=0.05) as sampler:
        for i in range(rounds + rollouts):
            before = wait_for(sampler.routed_to_leader, 60, "the Service on the leader alone")
            start, mark = time.monotonic(), len(sampler.samples)
            if i < rounds:
                pod = next(
                    p["metadata"]["name"]
                    for p in cluster.json("get", "pods", "-n", ns)["items"]
                    if p["status"].get("podIP") == before
                )
                cluster.kubectl("delete", "pod", "-n", ns, pod, "--wait=false")
            else:
                cluster.kubectl("rollout", "restart", "-n", ns, "deployment/api")
                cluster.kubectl("rollout", "status", "-n", ns, "deployment/api", "--timeout=180s")
            after = wait_for(
                lambda b=before: (ip := sampler.routed_to_leader()) not in (None, b) and ip,
                90,
                "the Service on the next leader",
            )
            time.sleep(1)
            window = sampler.samples[mark:]
            gap = longest(window, lambda s: not s.routed)
            (unrouted_delete if i < rounds else unrouted_rollout).append(gap)
            follow.append(follow_time(sampler.samples, start, after))
            _log(f"leader Service {i + 1}/{rounds + rollouts}: no endpoint for {gap:.2f}s")
            cluster.kubectl("rollout", "status", "-n", ns, "deployment/api", "--timeout=180s")
    return {
        "service_delete_unrouted_s": summary(unrouted_delete),
        "service_rollout_unrouted_s": summary(unrouted_rollout),
        "service_follow_s": summary(follow),
    }


def _cell(s: dict[str, float] | None) -> str:
    return f"{s['p50']} / {s['max']}" if s and s.get("n") else "-"


def _ratio(theirs: dict[str, float] | None, ours: dict[str, float] | None) -> str:
    if not theirs or not ours or not theirs.get("n") or not ours.get("n") or not ours["p50"]:
        return ""
    return f" ({theirs['p50'] / ours['p50']:.0f}×)"


def app_markdown(loads: dict[str, Any]) -> str:
    """The leader's app (``bench/apppause.py``): its longest pause within one term per window."""
    keys = [k for k in loads if loads[k].get("app_pauses")]
    if not keys:
        return ""
    out = (
        "\nThe leader's app (`bench/apppause.py`: reads `state.json` every 50 ms, acts only "
        "while `is_leader` and `valid_until` say so): the longest pause within one term "
        "(same fencing token) per window, in seconds; each pause over 100 ms put down to "
        "what the app's loop met (the file unreadable, `is_leader` false, `valid_until` "
        "passed, else its own loop late: it was not run); loop late: iterations that "
        "overslept by more than 100 ms, in any pod; CPU pressure: the share of the window "
        "in which some task on the machine waited for a CPU (`/proc/pressure/cpu`).\n\n"
        "| window | workload | longest same-term pause, each | pauses > 100 ms by cause "
        "| loop late (acting), max | runnable, not run, in the longest | CPU pressure |\n"
        "|---|---|---|---|---|---|---|\n"
    )
    for key in keys:
        for kind, found in loads[key]["app_pauses"].items():
            longest = ", ".join(
                f"{w['longest_pause_s']:.3f}" if w["longest_pause_s"] else "< 0.1" for w in found
            )
            causes: dict[str, int] = {}
            for w in found:
                for cause, n in w["causes"].items():
                    causes[cause] = causes.get(cause, 0) + n
            named = ", ".join(f"{c} {n}" for c, n in causes.items() if n) or "none"
            late = sum(w["late_lines"] for w in found)
            acting = sum(w["late_acting_lines"] for w in found)
            worst = max(w["max_late_s"] for w in found)
            run_delay = ", ".join(
                f"{w['longest_pause']['run_delay']:.3f}" if w["longest_pause"] else "-"
                for w in found
            )
            pressure = ", ".join(f"{w['cpu_pressure']:.2f}" for w in found)
            out += (
                f"| {kind} (n={len(found)}) | {loads[key]['label']} | {longest} | {named} "
                f"| {late} ({acting}), {worst:.3f} | {run_delay} | {pressure} |\n"
            )
    out += "\nWho used the CPU (seconds per window, mean; `bench/cpuuse.py`):\n\n"
    for key in keys:
        for kind, found in loads[key]["app_pauses"].items():
            used: dict[str, float] = {}
            for w in found:
                for who, seconds in (w.get("cpu_seconds") or {}).items():
                    used[who] = used.get(who, 0.0) + seconds / len(found)
            busy = used.pop("machine busy", 0.0)
            secs = sum(w["seconds"] for w in found) / len(found)
            top = ", ".join(
                f"{who} {v:.2f}" for who, v in sorted(used.items(), key=lambda x: -x[1])
            )
            out += f"- {kind}, {loads[key]['label']}: {secs:.1f} s, busy {busy:.2f}: {top}\n"
    return out


def markdown(res: dict[str, Any]) -> str:
    rows = [
        ("node start: kubelet to Node Ready", f"{res['node_ready_s']} s"),
        ("node start: Ready and CoreDNS answering", f"{res['node_and_dns_ready_s']} s"),
        ("image size (uncompressed)", f"{res['image_bytes'] / 1e6:.0f} MB"),
        ("helm install --wait (2 injector pods Ready)", f"{res['helm_install_wait_s']} s"),
    ]
    out = "| measure | value |\n|---|---|\n" + "\n".join(f"| {a} | {b} |" for a, b in rows) + "\n"
    loads = res.get("workloads") or {}
    if loads:
        ours = loads.get("sidecar") or {}
        keys = list(loads)
        out += (
            "\nEach way of electing in its own 3-replica Deployment (default rolling update, "
            "readiness not gated), one after the other in this run; seconds, p50 / max; "
            "in brackets, p50 against grelmicro-sidecar's:\n\n"
            "| measure | " + " | ".join(loads[k]["label"] for k in keys) + " |\n"
            "|---|" + "---|" * len(keys) + "\n"
        )
        for key, label in (
            ("rollout_restart_leaderless_s", "kubectl rollout restart: leaderless per rollout"),
            ("rollout_handovers", "kubectl rollout restart: handovers per rollout"),
            (
                "delete_pod_leaderless_s",
                "kubectl delete pod (leader): leaderless, release -> claim",
            ),
            (
                "delete_pod_to_successor_s",
                "kubectl delete pod (leader): delete -> successor claims",
            ),
            ("delete_pod_to_sidecar_sigterm_s", "... of which delete -> the sidecar's SIGTERM"),
            ("sidecar_sigterm_to_release_s", "... of which the sidecar's SIGTERM -> released"),
        ):
            counts = [(loads[k].get(key) or {}).get("n", 0) for k in keys]
            n = max(counts)
            cells = [
                _cell(loads[k].get(key))
                + (f" (n={c})" if c and c != n else "")
                + (
                    ""
                    if k == "sidecar" or "handovers" in key
                    else _ratio(loads[k].get(key), ours.get(key))
                )
                for k, c in zip(keys, counts, strict=True)
            ]
            out += f"| {label} (n={n}) | " + " | ".join(cells) + " |\n"
        out += (
            "| 3 replicas created -> first leader | "
            + " | ".join(f"{loads[k]['create_to_leader_s']} s" for k in keys)
            + " |\n"
        )
        for key, label in (
            ("create_to_process_s", "... of which created -> the first election process starts"),
            ("leader_process_to_claim_s", "... the first leader's process start -> its claim"),
            (
                "leader_process_to_started_log_s",
                "... of which its process start -> its 'starting' log line",
            ),
            ("leader_start_cpu_s", "... the CPU its process had used by then"),
        ):
            cells = [f"{loads[k][key]} s" if key in loads[k] else "-" for k in keys]
            out += f"| {label} | " + " | ".join(cells) + " |\n"
        out += (
            "| election process RSS per pod (VmRSS, MiB) | "
            + " | ".join(", ".join(str(v) for v in loads[k]["rss_mib"]) or "-" for k in keys)
            + " |\n"
        )
        out += (
            "| holder changes without a release (takeovers) | "
            + " | ".join(str(loads[k]["takeovers_without_release"]) for k in keys)
            + " |\n"
        )
        if any("measured" in loads[k] for k in keys):
            cells = [str(loads[k].get("measured", "this run")) for k in keys]
            out += "| measured in | " + " | ".join(cells) + " |\n"
        out += app_markdown(loads)
    service = [
        (
            "service_delete_unrouted_s",
            "leader Service, kubectl delete pod (leader): longest time without an endpoint",
        ),
        (
            "service_rollout_unrouted_s",
            "leader Service, kubectl rollout restart: longest time without an endpoint",
        ),
        ("service_follow_s", "leader Service: Lease names the new leader -> routed to it alone"),
    ]
    if any(key in res for key, _ in service):
        out += (
            "\n| leader Service (manifests/examples/leader-service.yaml) | p50 / max |\n|---|---|\n"
        )
        if "service_measured" in res:
            out += f"| measured in | {res['service_measured']} |\n"
        for key, label in service:
            if key in res:
                s = res[key]
                out += f"| {label} (n={s['n']}) | {s['p50']} s / {s['max']} s |\n"
    return out


def merged(previous: dict[str, Any], res: dict[str, Any]) -> dict[str, Any]:
    """A run of some workloads (``--only``) laid over the last results: the workloads it did
    not measure, and the leader Service, are kept, each marked with the run that measured
    it, so one partial run does not wipe the comparison the docs quote."""
    before = f"{str(previous['source'].get('commit'))[:7]}, {previous['started'][:10]}"
    kept = {
        k: dict(v, measured=v.get("measured", before))
        for k, v in (previous.get("workloads") or {}).items()
        if k not in res["workloads"]
    }
    out = dict(res, workloads={**res["workloads"], **kept})
    if "service" not in res["only"]:
        for key in ("service_delete_unrouted_s", "service_rollout_unrouted_s", "service_follow_s"):
            if key in previous:
                out[key] = previous[key]
        out["service_measured"] = previous.get("service_measured", before)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pods")
    parser.add_argument("--rounds", type=int, default=10, help="leader pod deletions (default 10)")
    parser.add_argument("--rollouts", type=int, default=10, help="rollout restarts (default 10)")
    parser.add_argument(
        "--only",
        action="append",
        choices=("sidecar", "sidecar-label", "clientgo", "grelmicro", "service"),
        help="measure only these (repeatable; default all)",
    )
    parser.add_argument(
        "--report-only", action="store_true", help="rewrite PODS.md from results/pods.json"
    )
    parser.add_argument(
        "--cpu-load",
        type=int,
        default=0,
        help="busy processes on the machine during the steady window and the disruptions",
    )
    parser.add_argument(
        "--app-cpu-request",
        help="a CPU request for the sidecar workloads' app (default none, as in tests/e2e)",
    )
    args = parser.parse_args(argv)
    from bench.provenance import machine, source

    if args.report_only:
        res = json.loads(RESULTS.read_text())
    else:
        measured = source()  # before the run: the tree the image is built from
        res = run(
            args.rounds, args.rollouts, set(args.only or ()), args.app_cpu_request, args.cpu_load
        )
        res["app_cpu_request"], res["cpu_load"] = args.app_cpu_request, args.cpu_load
        res["source"] = measured
        res["rounds"], res["rollouts"] = args.rounds, args.rollouts
        res["only"] = sorted(args.only or ())
        if args.only and RESULTS.exists():
            res = merged(json.loads(RESULTS.read_text()), res)
    res.setdefault("machine", machine())
    res.setdefault("source", source())
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(res, indent=1) + "\n")
    m, src = res["machine"], res["source"]
    dirty = " with uncommitted changes" if src.get("dirty") else ""
    only = "".join(f" --only {o}" for o in res.get("only", []))
    if res.get("app_cpu_request"):
        only += f" --app-cpu-request {res['app_cpu_request']}"
    if res.get("cpu_load"):
        only += f" --cpu-load {res['cpu_load']}"
    text = (
        "# Real pods on this machine's node\n\n"
        f"`python -m bench.pods --rounds {res['rounds']} --rollouts {res['rollouts']}{only}`, "
        f"{res['started']}, "
        f"commit `{str(src.get('commit'))[:12]}`{dirty}; {m['cpu']}, {m['cores']} cores, Linux {m['kernel']}.\n"
        "Leaderless times come from a watch on the Lease (release, emptied or handed off -> "
        "the next holder's own claim); "
        '"delete -> successor" includes the app container\'s own shutdown, which runs before the '
        "sidecar gets SIGTERM (native sidecar order).\n\n" + markdown(res)
    )
    REPORT.write_text(text)
    print(text)
    return 1 if res["left_behind"] else 0


if __name__ == "__main__":
    sys.exit(main())
