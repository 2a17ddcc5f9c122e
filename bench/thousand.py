"""1,000 elections × 3 candidates at steady state: what the API server and etcd pay (issue 38).

``python -m bench.thousand [--elections 1000]`` (its own control plane;
writes ``results/thousand.json``), or ``python -m bench --only
thousand-elections`` (the full run's control plane; RESULTS.md). For
grelmicro-sidecar, then client-go, never both at once:

1. the API server and etcd are restarted (each implementation starts from
   the same memory), every candidate's certificate is signed;
2. ``hosts`` processes start, each running its share of the candidates
   (``bench.host`` for the sidecar, the Go peer's ``--candidates`` mode for
   client-go): 3,000 processes would need ~78 GB. Each candidate keeps its
   own client certificate, connection and (sidecar) watch, so the API server
   sees what 3,000 processes would make it see; an election's candidates are
   in three different processes;
3. once every election has a leader (state files), a warm-up, then a
   window: the API server's and etcd's CPU from /proc and their RSS sampled
   every few seconds; etcd's revision (one per write) and its ``/metrics``;
   the API server's Lease watchers and watch events from its ``/metrics``;
   every request by verb and answer from the audit log;
4. every host SIGTERMed (then killed), the namespace's Leases deleted.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import peers
from . import thousandstats as stats
from .harness import IMPLS, AuditLog, Credentials, Impl, cpu_seconds, loadavg, rss_mb, user_name
from .standalone import run_alone

ELECTIONS, PER, HOSTS = 1000, 3, 10
WARMUP, WINDOW = 30.0, 60.0
#: After the restart, then a window with no candidates (what the control plane costs alone).
SETTLE, IDLE = 10.0, 20.0
#: Seconds between two candidates' starts within one host (every host starts at once):
#: 3,000 sidecars started within 30 s drove this 2-core API server into timeouts and
#: retries that none of its leaders outlived (every renew deadline passed).
STAGGER = 1.0
#: Not every election led by then: the window is measured anyway, and says how many did.
UP_CAP = 600.0
SAMPLE = 5.0
ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).parent / "results" / "thousand.json"


def _log(msg: str) -> None:
    print(f"[bench] {time.strftime('%H:%M:%S')} {msg}", flush=True)


@dataclass(frozen=True)
class Seat:
    election: str
    identity: str
    state_dir: Path


class Hosts:
    """The host processes of one implementation, and where each candidate publishes."""

    def __init__(self, impl: Impl, workdir: Path, creds: Credentials, elections: int, hosts: int):
        self.impl, self.dir = impl, workdir / "thousand" / impl.key
        self.seats: list[Seat] = []
        rows: list[list[str]] = [[] for _ in range(hosts)]
        for i in range(elections):
            for j in range(PER):
                ident = f"t{i}-{j}"
                seat = Seat(f"t{i}", ident, self.dir / "state" / ident)
                kc = creds.kubeconfig(user_name(impl.key, ident))
                line = "\t".join(
                    [impl.namespace, seat.election, ident, str(kc), str(seat.state_dir)]
                )
                rows[(i * PER + j) % hosts].append(line)  # an election's three: three hosts
                self.seats.append(seat)
        self.specs = []
        for h, lines in enumerate(rows):
            spec = self.dir / f"host-{h}.tsv"
            spec.parent.mkdir(parents=True, exist_ok=True)
            spec.write_text("\n".join(lines) + "\n")
            self.specs.append(spec)
        self.procs: list[subprocess.Popen[bytes]] = []

    def argv(self, spec: Path) -> list[str]:
        if self.impl.key == "sidecar":
            return [sys.executable, "-m", "bench.host", str(spec), f"--stagger={STAGGER}"]
        return [str(peers.ensure_clientgo()), f"--candidates={spec}", f"--stagger={STAGGER}s"]

    def start(self) -> None:
        env = os.environ | {"PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        for spec in self.specs:
            with open(spec.with_suffix(".log"), "ab") as log:
                self.procs.append(
                    subprocess.Popen(
                        self.argv(spec),
                        stdout=log,
                        stderr=log,
                        stdin=subprocess.DEVNULL,
                        cwd=ROOT,
                        env=env,
                        start_new_session=True,
                    )
                )

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p.poll() is None]

    def leaders(self) -> dict[str, str]:
        """Per election, a candidate whose state file says it leads."""
        out = {}
        for seat in self.seats:
            try:
                st = json.loads((seat.state_dir / "state.json").read_text())
            except (OSError, ValueError):
                continue
            if st.get("is_leader"):
                out[seat.election] = seat.identity
        return out

    def lost(self) -> int:
        """Leaderships lost without a stop, as the hosts logged them (the sidecar: stepped
        down, any reason but a shutdown; the client-go peer: a candidate restarted)."""
        needle = b'"stepped down"' if self.impl.key == "sidecar" else b"lost its lease"
        return sum(s.with_suffix(".log").read_bytes().count(needle) for s in self.specs)

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 60
        for p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)


class Sampler(threading.Thread):
    """RSS of the API server, etcd and the hosts, every ``SAMPLE`` seconds."""

    def __init__(self, pids: dict[str, list[int]]):
        super().__init__(daemon=True, name="thousand-rss")
        self.pids, self.samples = pids, {k: list[float]() for k in pids}
        self.halt = threading.Event()

    def run(self) -> None:
        while True:
            for k, pids in self.pids.items():
                self.samples[k].append(sum(rss_mb(p) or 0.0 for p in pids))
            if self.halt.wait(SAMPLE):
                return


def _etcd_metrics(plane: Any) -> str:
    url = f"http://127.0.0.1:{plane.state.etcd_port}/metrics"
    with urllib.request.urlopen(url, timeout=30) as resp:
        return str(resp.read().decode())


def snapshot(plane: Any, hosts: list[int]) -> dict[str, Any]:
    cpu = {name: cpu_seconds(plane.procs[name].pid) for name in ("kube-apiserver", "etcd")}
    out: dict[str, Any] = {"wall": time.time(), "cpu": cpu}
    cpu["hosts"] = sum(cpu_seconds(p) or 0.0 for p in hosts)
    out["revision"] = plane.etcd_revision()
    _, body = plane.get("/metrics", timeout=30)
    return out | {
        "api": stats.leases(body.decode()),
        "etcd": stats.etcd_counters(_etcd_metrics(plane)),
    }


def restart_plane(plane: Any) -> None:
    """etcd and the API server restarted: each implementation starts from the same memory."""
    plane.stop_process("kube-apiserver")
    plane.restart_etcd()
    plane.start_apiserver()


def steady(plane: Any, hosts: list[int], seconds: float) -> dict[str, Any]:
    """A window of ``seconds``: CPU and sampled RSS, etcd's and the API server's counters."""
    pids = {"kube-apiserver": [plane.procs["kube-apiserver"].pid],
            "etcd": [plane.procs["etcd"].pid], "hosts": hosts}  # fmt: skip
    sampler = Sampler(pids)
    begin = snapshot(plane, hosts)
    sampler.start()
    time.sleep(seconds)
    end = snapshot(plane, hosts)
    sampler.halt.set()
    sampler.join()
    return stats.window(begin, end, sampler.samples)


def run_one(
    impl: Impl, plane: Any, workdir: Path, creds: Credentials, audit: AuditLog,
    elections: int, hosts: int, warmup: float, window: float,
) -> dict[str, Any]:  # fmt: skip
    restart_plane(plane)
    group = Hosts(impl, workdir, creds, elections, hosts)  # the certificates: seconds
    time.sleep(SETTLE)
    idle = steady(plane, [], IDLE)
    offset, t0 = audit.offset(), time.time()
    group.start()
    try:
        up: float | None = None
        while len(led := group.leaders()) < elections:
            if time.time() - t0 > UP_CAP:
                _log(f"  {impl.key}: {len(led)} of {elections} elections led after "
                     f"{UP_CAP:g} s; measuring anyway")  # fmt: skip
                break
            if not group.pids():
                raise RuntimeError(f"{impl.key}: every host exited; see {group.dir}")
            time.sleep(2)
        else:
            up = time.time() - t0
            _log(f"  {impl.key}: every election led after {up:.0f} s; warm-up {warmup:g} s ...")
        time.sleep(warmup)
        lead0 = group.leaders()
        out = steady(plane, group.pids(), window)
        lead1, load = group.leaders(), loadavg()
    finally:
        group.stop()
        plane.kubectl("delete", "leases", "--all", "-n", impl.namespace, "--request-timeout=120s",
                      check=False)  # fmt: skip
    reqs = audit.requests(offset, prefix=f"bench:{impl.key}:t")
    return {
        "impl": impl.key, "elections": elections, "per_election": PER, "hosts": hosts,
        "up_seconds": up and round(up, 1), "up_cap_seconds": UP_CAP, "stagger": STAGGER,
        "loadavg": load, **out,
        "leader_changes": sum(lead0.get(e) != lead1.get(e) for e in set(lead0) | set(lead1)),
        "led_at_start": len(lead0), "led_at_end": len(lead1),
        **stats.requests(reqs, out["begin"], out["end"]),
        "lost_leases_logged": group.lost(),
        "idle": idle,
    }  # fmt: skip


def measure(
    plane: Any, workdir: Path, creds: Credentials, audit: AuditLog, *,
    elections: int = ELECTIONS, hosts: int = HOSTS, warmup: float = WARMUP,
    window: float = WINDOW, impls: tuple[str, ...] = ("sidecar", "clientgo"),
) -> dict[str, Any]:  # fmt: skip
    out: dict[str, Any] = {}
    for key in impls:
        _log(f"{elections} elections × {PER} {key} candidates in {hosts} processes ...")
        try:
            out[key] = run_one(
                IMPLS[key], plane, workdir, creds, audit, elections, hosts, warmup, window
            )
        except (TimeoutError, RuntimeError) as err:  # the other implementation still runs
            _log(f"  {key}: {err}")
            out[key] = {"gap": str(err)}
        time.sleep(5)
    return out


def main(argv: list[str] | None = None) -> int:
    from .report import LABELS

    parser = argparse.ArgumentParser(prog="python -m bench.thousand", description=__doc__)
    parser.add_argument("--elections", type=int, default=ELECTIONS)
    parser.add_argument("--hosts", type=int, default=HOSTS)
    parser.add_argument("--warmup", type=float, default=WARMUP)
    parser.add_argument("--window", type=float, default=WINDOW)
    parser.add_argument("--impls", default="sidecar,clientgo")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    def scenario(plane: Any, workdir: Path, creds: Credentials, audit: AuditLog) -> Any:
        return measure(
            plane, workdir, creds, audit, elections=args.elections, hosts=args.hosts,
            warmup=args.warmup, window=args.window, impls=tuple(args.impls.split(",")),
        )  # fmt: skip

    res = run_alone("thousand", "thousand", scenario, args.out)
    print(stats.markdown(res, LABELS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
