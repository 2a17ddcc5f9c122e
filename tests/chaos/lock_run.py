"""Chaos for ``lock``: commands under faults, and proof that no two ever ran at once.

Three ``grelmicro-sidecar lock`` processes, each reaching the API server
through its own fault proxy, each running a process tree (``TREES``): a shell
whose child runs ``tests/sidecar/heartbeat.py`` and ignores SIGTERM, so only
SIGKILL ends it; the child stays in the shell's process group, or has a
session of its own, or is an orphan in a session of its own. A supervisor
restarts any lock process that exits, as the kubelet would. Faults hit the process whose
command runs: SIGSTOP of the lock process (longer than the lease), SIGSTOP of
its guard, SIGKILL and SIGTERM of the lock process, and an API partition
(blackhole) of the lock process, longer than the lease.

The proof is the heartbeats: every command appends its wall time every 20 ms,
so when each run of each command started and ended is known to 20 ms. Two
runs of different lock processes that overlap in time are a violation, and so
is any process of a tree still running a lease after every lock process has
exited (a guard whose lock was killed ends its tree at the last deadline).
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.cluster import ControlPlane
from tests.sidecar.proc import SidecarProcess
from tests.sidecar.trees import describe, kill_survivors, survivors, tree

from .proxy import FaultProxy, proxy_loop

BEAT = 0.02
TIMINGS = ("--lease-duration=3s", "--renew-deadline=2s", "--retry-period=500ms")
LEASE = 3.0
KINDS = ("sigstop-lock", "sigstop-guard", "sigkill", "sigterm", "partition")
#: each lock's command: the heartbeat in a child that ignores SIGTERM, in the shell's
#: process group; in a session of its own; an orphan (its parent exits) in a session of its own
TREES = (
    '(trap "" TERM; exec {hb} {out} --on-term ignore) & wait',
    "setsid {hb} {out} --on-term ignore & wait",
    "(setsid {hb} {out} --on-term ignore &); exec sleep 86400",
)


@dataclass
class Run:
    who: str
    start: float
    end: float  # the last heartbeat, plus one period
    token: str


@dataclass
class LockReport:
    runs: list[Run]
    overlaps: list[tuple[Run, Run]]
    faults: dict[str, int]
    exits: dict[int, int]
    tracebacks: list[str] = field(default_factory=list)
    #: processes of the commands' trees still running once every lock process exited
    leftovers: list[int] = field(default_factory=list)
    #: how each lock process ended at the teardown, and what was left (state, parent, argv)
    teardown: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"{len(self.runs)} command runs, {len(self.overlaps)} overlaps, "
            f"{len(self.leftovers)} leftover processes"
            + (f" {self.teardown}" if self.leftovers else "")
            + ", faults "
            + ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items()))
            + "; lock exit codes "
            + ", ".join(f"{k}: {v}" for k, v in sorted(self.exits.items()))
        )


def _traceback_of(log: str) -> str:
    """The first traceback in a log, with the five lines before it (what the process was doing)."""
    lines = log.splitlines()
    first = next(i for i, line in enumerate(lines) if "Traceback" in line)
    return "\n".join(lines[max(0, first - 5) : first + 40])


def runs_of(who: str, path: Path) -> list[Run]:
    """Each run of ``who``'s command: from its ``start`` line to its last line."""
    runs: list[Run] = []
    if not path.exists():
        return runs
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue  # a line cut short by SIGKILL
        kind, at, token = parts[0], float(parts[1]), parts[2]
        if kind == "start" or not runs:
            runs.append(Run(who, at, at + BEAT, token))
        else:
            runs[-1].end = at + BEAT
    return runs


def overlaps(runs: list[Run]) -> list[tuple[Run, Run]]:
    ordered = sorted(runs, key=lambda r: r.start)
    found = []
    for i, a in enumerate(ordered):
        for b in ordered[i + 1 :]:
            if b.start >= a.end:
                break
            if b.who != a.who:
                found.append((a, b))
    return found


class LockChaos:
    def __init__(self, cluster: ControlPlane, namespace: str, workdir: Path, seed: int):
        self.rng = random.Random(seed)
        self.loop = proxy_loop()
        upstream = int(cluster.server.rsplit(":", 1)[1])
        admin = json.loads(Path(cluster.kubeconfig).read_text())
        self.procs: dict[str, SidecarProcess] = {}
        self.proxies: dict[str, FaultProxy] = {}
        self.beats: dict[str, Path] = {}
        for i in range(3):
            who = f"lock-{i}"
            proxy = FaultProxy(self.loop, "127.0.0.1", upstream, seed=seed + i).start()
            doc = json.loads(json.dumps(admin))
            doc["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
            kubeconfig = workdir / f"{who}.kubeconfig"
            kubeconfig.write_text(json.dumps(doc))
            self.beats[who] = workdir / f"{who}.beats"
            cmd = tree(TREES[i], out=self.beats[who])
            self.procs[who] = SidecarProcess(
                workdir,
                kubeconfig,
                namespace,
                who,
                extra=(*TIMINGS, "--kill-grace=500ms"),
                command=cmd,
            )
            self.proxies[who] = proxy
        self.faults: dict[str, int] = {}
        self.exits: dict[int, int] = {}
        self._stop = threading.Event()
        #: set by whoever runs this beside the election, when that run ends early
        self.done = threading.Event()
        self._paused: set[str] = set()

    def _supervise(self) -> None:
        """Restart a lock process that exited (the kubelet's restartPolicy: Always)."""
        while not self._stop.is_set():
            for who, proc in self.procs.items():
                if (
                    proc.proc is not None
                    and proc.proc.poll() is not None
                    and who not in self._paused
                ):
                    code = proc.proc.returncode
                    self.exits[code] = self.exits.get(code, 0) + 1
                    time.sleep(0.3)
                    proc.start()
            self._stop.wait(0.1)

    def running(self) -> str | None:
        """Whose command beat in the last 100 ms."""
        now = time.time()
        for who, path in self.beats.items():
            try:
                if now - path.stat().st_mtime < 0.1:
                    return who
            except OSError:
                continue
        return None

    def _guard_of(self, proc: SidecarProcess) -> int | None:
        assert proc.proc is not None
        out = subprocess.run(
            ["pgrep", "-P", str(proc.proc.pid), "-f", "guard.py"], capture_output=True, text=True
        ).stdout.split()
        return int(out[0]) if out else None

    def inject(self) -> None:
        who = self.running()
        if who is None:
            return
        kind = self.rng.choice(KINDS)
        proc = self.procs[who]
        assert proc.proc is not None
        if kind == "sigstop-lock":
            self._paused.add(who)
            proc.signal(signal.SIGSTOP)
            time.sleep(LEASE + self.rng.uniform(0.5, 2.0))
            proc.signal(signal.SIGCONT)
            self._paused.discard(who)
        elif kind == "sigstop-guard":
            guard = self._guard_of(proc)
            if guard is None:
                return
            subprocess.run(["kill", "-STOP", str(guard)], check=False)
            time.sleep(self.rng.uniform(1.0, 3.0))
            subprocess.run(["kill", "-CONT", str(guard)], check=False)
        elif kind == "sigkill":
            proc.signal(signal.SIGKILL)
        elif kind == "sigterm":
            proc.signal(signal.SIGTERM)
        elif kind == "partition":
            self.proxies[who].set("blackhole")
            time.sleep(LEASE + self.rng.uniform(1.0, 2.0))
            self.proxies[who].set("pass")
        self.faults[kind] = self.faults.get(kind, 0) + 1

    def run(self, seconds: float) -> LockReport:
        for proc in self.procs.values():
            proc.start()
        supervisor = threading.Thread(target=self._supervise, daemon=True)
        supervisor.start()
        teardown: list[str] = []
        try:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline and not self.done.is_set():
                time.sleep(self.rng.uniform(1.0, 2.5))
                self.inject()
        finally:
            self._stop.set()
            supervisor.join(5)
            for proc in self.procs.values():
                if proc.proc is not None and proc.proc.poll() is None:
                    proc.signal(signal.SIGCONT)
                    proc.signal(signal.SIGTERM)
            for who, proc in self.procs.items():
                try:
                    teardown.append(f"{who} exited {proc.wait(20)}")
                except subprocess.TimeoutExpired:
                    teardown.append(f"{who} SIGKILLed after 20 s")
                    proc.stop()
            for proxy in self.proxies.values():
                proxy.close()
            self.loop.close()
        # A lock SIGKILLed by the last fault leaves its guard to end the tree at the last
        # deadline it was given, up to a lease from now: only what outlives that is left over.
        settle = time.monotonic() + LEASE + 1.0
        while (
            leftovers := [pid for path in self.beats.values() for pid in survivors(path)]
        ) and time.monotonic() < settle:
            time.sleep(0.1)
        teardown += [describe(pid) for pid in leftovers]
        for path in self.beats.values():
            kill_survivors(path)
        runs = [r for who, path in self.beats.items() for r in runs_of(who, path)]
        tracebacks = [
            f"{who}:\n{_traceback_of(log)}"
            for who, p in self.procs.items()
            if "Traceback" in (log := p.raw_log())
        ]
        return LockReport(
            runs, overlaps(runs), self.faults, self.exits, tracebacks, leftovers, teardown
        )
