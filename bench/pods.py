"""``python -m bench.pods``: the product in real pods on this machine's node, measured.

What a user feels, on the node of ``tests/cluster/node.py`` with the image
built from the Dockerfile and the chart installed:

- node start (kubelet to Ready, CoreDNS answering) and the image's size;
- pod create -> leader elected: ``kubectl apply`` of a 3-replica annotated
  Deployment until one pod's ``/leader`` answers 200 from inside its app;
- the sidecar container's RSS in a pod (``VmRSS`` of its process, steady state);
- leaderless time on ``kubectl delete pod`` of the leader, ``--rounds`` times:
  from the Lease's release (holder cleared, or handed off) to the successor's claim,
  both seen by a watch on the Lease; and delete -> successor;
- leaderless time per ``kubectl rollout restart`` (default strategy, readiness
  not gated), summed over the handovers the rollout causes;
- the leader Service (``manifests/examples/leader-service.yaml``, 3 replicas,
  the leader label): per ``kubectl delete pod`` of the leader and per rollout,
  how long the Service had no ready endpoint, and how long after the Lease
  named the new leader the Service routed to it alone (sampled every 50 ms:
  EndpointSlices, labels and the Lease, through the API).

Writes ``bench/results/pods.json`` and prints a Markdown table. Numbers only:
the behaviour is asserted by ``tests/e2e``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.cluster import images
from tests.cluster.node import Node
from tests.e2e.conftest import CHART, ROOT, Cluster, tool, wait_for
from tests.e2e.test_election import deployment, leaders
from tests.e2e.test_leader_service import Sampler, follow_time, longest

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "pods.json"
REPORT = HERE / "PODS.md"
NS = "bench"


def _log(msg: str) -> None:
    print(f"[bench.pods] {msg}", file=sys.stderr, flush=True)


class LeaseWatch:
    """Every change of one Lease's holder, timestamped on arrival (``kubectl get -w``).

    A hand-off (a release naming its successor, contract §2) counts as no holder:
    the successor leads only once its own claim is written.
    """

    def __init__(self, cluster: Cluster, name: str) -> None:
        kubectl = tool("kubectl", "kubernetes")
        self.proc = subprocess.Popen(
            [
                str(kubectl),
                f"--kubeconfig={cluster.kubeconfig}",
                "get",
                "lease",
                name,
                "-n",
                NS,
                "-w",
                "-o",
                "jsonpath={.spec.holderIdentity}{' '}"
                "{.metadata.annotations.leader-election\\.grelmicro\\.io/handoff-from}{'\\n'}",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.changes: list[tuple[float, str]] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            holder, _, handed_by = line.strip().partition(" ")
            if handed_by:
                holder = ""  # a release that names a successor: nobody leads until it claims
            if not self.changes or self.changes[-1][1] != holder:
                self.changes.append((time.time(), holder))

    def since(self, t: float) -> list[tuple[float, str]]:
        return [c for c in self.changes if c[0] >= t]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def gaps(changes: list[tuple[float, str]], start: float) -> list[float]:
    """Leaderless intervals: from a cleared holder to the next holder."""
    out, cleared = [], None
    for t, holder in changes:
        if not holder:
            cleared = t
        elif cleared is not None:
            out.append(t - cleared)
            cleared = None
    return out


def sidecar_rss_mib() -> list[float]:
    """VmRSS of every ``grelmicro-sidecar run`` process on this machine (the pods' sidecars)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
            if any(part.endswith(b"grelmicro-sidecar") for part in cmd[:2]) and b"run" in cmd:
                for line in (proc / "status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        found.append(int(line.split()[1]) / 1024)
        except OSError:
            continue
    return found


def summary(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50": round(statistics.median(values), 3) if values else float("nan"),
        "max": round(max(values), 3) if values else float("nan"),
    }


def run(rounds: int, rollouts: int) -> dict[str, Any]:
    node = Node(Path(tempfile.mkdtemp(prefix="grelmicro-bench-node-")))
    res: dict[str, Any] = {"started": datetime.now().isoformat(timespec="seconds")}
    try:
        node.start()
        res["node_ready_s"] = round(node.timings["node_ready"], 2)
        res["node_and_dns_ready_s"] = round(node.timings["ready"], 2)
        cluster = Cluster(node.kubeconfig)
        archives = images.product_images()
        node.load_images(archives)
        res["image_bytes"] = images.image_size(archives[0])
        t0 = time.monotonic()
        cluster.helm(
            "install", "gs", str(CHART), "-n", "grelmicro-system", "--create-namespace", "--wait"
        )
        res["helm_install_wait_s"] = round(time.monotonic() - t0, 2)
        cluster.kubectl("create", "namespace", NS)
        cluster.kubectl("apply", "-n", NS, "-f", str(ROOT / "manifests" / "rbac.yaml"))

        t0 = time.monotonic()
        cluster.kubectl("apply", "-n", NS, "-f", "-", input=json.dumps(deployment("worker")))
        wait_for(lambda: leaders(cluster, NS, "worker"), 120, "a leader", interval=0.1)
        res["create_to_leader_s"] = round(time.monotonic() - t0, 2)
        cluster.kubectl("rollout", "status", "-n", NS, "deployment/worker", "--timeout=120s")
        time.sleep(10)
        res["sidecar_rss_mib"] = [round(v, 1) for v in sidecar_rss_mib()]

        watch = LeaseWatch(cluster, "leader-worker")
        time.sleep(1)
        delete_gap, delete_total = [], []
        for i in range(rounds):
            old = wait_for(lambda: leaders(cluster, NS, "worker"), 60, "a leader")[0]
            t = time.time()
            cluster.kubectl("delete", "pod", "-n", NS, old, "--wait=false")
            new = wait_for(
                lambda t=t, old=old: next((h for _, h in watch.since(t) if h and h != old), None),
                60,
                "a successor",
                0.02,
            )
            seen = next(ts for ts, h in watch.since(t) if h == new)
            delete_total.append(seen - t)
            delete_gap += gaps(watch.since(t), t)
            _log(f"delete {i + 1}/{rounds}: {old} -> {new} in {seen - t:.2f}s")
            cluster.kubectl("rollout", "status", "-n", NS, "deployment/worker", "--timeout=120s")
        res["delete_pod_leaderless_s"] = summary(delete_gap)
        res["delete_pod_to_successor_s"] = summary(delete_total)

        rollout_gap: list[float] = []
        for i in range(rollouts):
            t = time.time()
            cluster.kubectl("rollout", "restart", "-n", NS, "deployment/worker")
            cluster.kubectl("rollout", "status", "-n", NS, "deployment/worker", "--timeout=180s")
            wait_for(
                lambda: len(leaders(cluster, NS, "worker")) == 1, 60, "one leader after the rollout"
            )
            total = sum(gaps(watch.since(t), t))
            rollout_gap.append(total)
            _log(f"rollout {i + 1}/{rollouts}: leaderless {total:.2f}s in total")
        res["rollout_restart_leaderless_s"] = summary(rollout_gap)
        watch.stop()
        res.update(leader_service(cluster, rounds, rollouts))
    finally:
        left = node.stop()
        if not left:
            node.remove()
        res["left_behind"] = left
    return res


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


def markdown(res: dict[str, Any]) -> str:
    rows = [
        ("node start: kubelet to Node Ready", f"{res['node_ready_s']} s"),
        ("node start: Ready and CoreDNS answering", f"{res['node_and_dns_ready_s']} s"),
        ("image size (uncompressed)", f"{res['image_bytes'] / 1e6:.0f} MB"),
        ("helm install --wait (2 injector pods Ready)", f"{res['helm_install_wait_s']} s"),
        (
            "3-replica Deployment created -> leader seen from an app",
            f"{res['create_to_leader_s']} s",
        ),
        ("sidecar RSS per pod (VmRSS)", ", ".join(f"{v} MiB" for v in res["sidecar_rss_mib"])),
    ]
    for key, label in (
        ("delete_pod_leaderless_s", "kubectl delete pod (leader): leaderless, release -> acquire"),
        ("delete_pod_to_successor_s", "kubectl delete pod (leader): delete -> successor holds"),
        ("rollout_restart_leaderless_s", "kubectl rollout restart: leaderless per rollout"),
        (
            "service_delete_unrouted_s",
            "leader Service, kubectl delete pod (leader): longest time without an endpoint",
        ),
        (
            "service_rollout_unrouted_s",
            "leader Service, kubectl rollout restart: longest time without an endpoint",
        ),
        ("service_follow_s", "leader Service: Lease names the new leader -> routed to it alone"),
    ):
        if key not in res:
            continue
        s = res[key]
        rows.append((f"{label} (n={s['n']})", f"p50 {s['p50']} s, max {s['max']} s"))
    return "| measure | value |\n|---|---|\n" + "\n".join(f"| {a} | {b} |" for a, b in rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pods")
    parser.add_argument("--rounds", type=int, default=10, help="leader pod deletions (default 10)")
    parser.add_argument("--rollouts", type=int, default=10, help="rollout restarts (default 10)")
    parser.add_argument(
        "--report-only", action="store_true", help="rewrite PODS.md from results/pods.json"
    )
    args = parser.parse_args(argv)
    from bench.__main__ import machine, source

    if args.report_only:
        res = json.loads(RESULTS.read_text())
    else:
        res = run(args.rounds, args.rollouts)
        res["rounds"], res["rollouts"] = args.rounds, args.rollouts
    res.setdefault("machine", machine())
    res.setdefault("source", source())
    res.setdefault("rounds", res["delete_pod_to_successor_s"]["n"])
    res.setdefault("rollouts", res["rollout_restart_leaderless_s"]["n"])
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(res, indent=1) + "\n")
    m, src = res["machine"], res["source"]
    dirty = " with uncommitted changes" if src.get("dirty") else ""
    text = (
        "# Real pods on this machine's node\n\n"
        f"`python -m bench.pods --rounds {res['rounds']} --rollouts {res['rollouts']}`, {res['started']}, "
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
