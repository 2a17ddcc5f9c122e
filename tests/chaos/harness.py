"""The chaos harness: N sidecars in one election, random faults, a recorder, a checker.

Each sidecar is a real ``grelmicro-sidecar run`` process (``SidecarProcess``)
that reaches the API server through its own ``FaultProxy``. The driver injects
one fault at a time, with a quiet spell after each, from this menu:

==================  ==========================================================
``sigkill``         SIGKILL a sidecar (the leader more often than not), restart it
``sigterm``         SIGTERM (graceful: must exit 0 within the budget), restart it
``sigstop``         SIGSTOP for longer than the lease duration, then SIGCONT
``sigstop-short``   SIGSTOP past the renew deadline but about the lease duration (the
                    resumed leader may take its own Lease back, or lose a race for it)
``apiserver``       restart kube-apiserver
``etcd``            restart etcd
``partition``       blackhole the current leader's proxy only, longer than the lease
``delay``           slow a sidecar's link (0.2-1.5 s each way) for a few seconds
``drop``            a flaky link: cut 30 % of chunks/connections for a few seconds
``reset``           reset every open connection of a sidecar at once
``deleted-paused``  SIGSTOP the leader, ``kubectl delete lease`` while it sleeps, SIGCONT
``skew``            restart a sidecar with its wall clock 30 s-10 min ahead or behind
                    (libfaketime) for a few leases, then restart it with the host's
``flood``           500 idle half-sent requests on a sidecar's status port for seconds
``churn``           roster churn: for several seconds candidates under new names start
                    and others stop for good (SIGTERM, or SIGKILL), every 0.5-2 s, the
                    leader among them now and then; the population stays about N
``transfer``        the leader's app asks ``POST /transfer`` (``moves.py``), and
                    acknowledges the drain half the time
``unhealthy``       the leader's app fails its health checks for a few seconds
``ack-hang``        a transfer acknowledged at once, then its sidecar SIGSTOPped past
                    the lease (frozen mid-hand-over) and resumed
``restore``         (long run only) back up etcd's data, let the election move on,
                    restore it: resourceVersions go back (no ``--bump-revision``)
``restore-bump``    (long run only) the same restore with the revision bumped past the
                    one before it and compacted, as ``etcdutl snapshot restore
                    --bump-revision --mark-compacted`` does
``lease-rollback``  (long run only) read the Lease, let the election move on, write the
                    old object back through the API (an old record under a new
                    resourceVersion: a restore of one object, revision bumped)
==================  ==========================================================

Options for the long run (issue 27, items 7 and 8):

- ``old``: that many candidates (``old-1``...) run the sidecar of an older
  commit (``versions.py``) beside today's, as after an injector upgrade; their
  fencing tokens (``leaseTransitions`` before issue 12) are not judged against
  today's (resourceVersions), the overlaps are;
- ``lazy_apps``: today's sidecars run with ``--release=after-valid-until`` (the
  sidecar-only restart of §5: its app runs on), and each one's app is taken
  to act until the ``valid_until`` of any claiming file it may have read,
  even after a newer file says otherwise (an app that re-reads the file every
  few seconds): the checker does not cut those claims at the next version.

Sharded elections (issue 40, item 4): with ``shards`` above 1 every
candidate runs ``run --shards=N``; the recorder keeps each shard's entry of
every file and the checker judges each shard as an election of its own
(``checker``). The faults that aim at "the leader" aim at the candidate that
owns the most shards; ``deleted-paused`` deletes the Leases of the shards its
sleeper owns and ``lease-rollback`` writes back one shard's. The kinds that
need an app's health or ``/transfer`` (``SHARDLESS``) are not played: a
sharded sidecar takes neither. Each app acknowledges a shard's drain as soon
as it reads it, ``ack_drains`` of the time (the rest wait for the deadline),
and ``population`` bounds the churn's roster (``P`` from 2 to 6, say), so
the churn is the scale fault: pods joining and leaving move shards.

The short run (CI) first plays every kind once in a random order, then random
kinds until its time is up; the long run (``python -m tests.chaos``) plays
random kinds. The first sidecar (the *witness*) never gets a process fault, so
one process lives through the whole run for the fd/RSS trend.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sidecar.core.shards import SHARD_INFIX, shard_lease
from tests.cluster import ControlPlane
from tests.sidecar.proc import SidecarProcess
from tests.skew import skewed_clock

from .checker import (
    Fault,
    Report,
    acquisitions_of,
    check,
    claims_of,
    handovers_of,
    parse_ts,
    shard_claims,
    token_acquisitions,
)
from .moves import Ack, HealthApp, drain_token, post
from .proxy import FaultProxy, proxy_loop
from .recorder import Recorder, Target

KINDS = (
    "sigkill",
    "sigterm",
    "sigstop",
    "sigstop-short",
    "apiserver",
    "etcd",
    "partition",
    "delay",
    "drop",
    "reset",
    "deleted-paused",
    "flood",
    "skew",
    "churn",
    "transfer",
    "unhealthy",
    "ack-hang",
)
#: Restoring the shared CI cluster would take other tests' objects back in time.
LONG_KINDS = (*KINDS, "restore", "restore-bump", "lease-rollback")
#: Kinds that restart part of the control plane (tens of seconds each here).
SLOW_KINDS = ("apiserver", "etcd", "restore", "restore-bump")
PROCESS_KINDS = ("sigkill", "sigterm", "sigstop", "sigstop-short", "skew")
#: Kinds that take seconds, not tens of seconds (a kube-apiserver restart takes 10-25 s here).
CHEAP_KINDS = tuple(k for k in KINDS if k not in ("apiserver", "etcd"))
#: Kinds a sharded election does not take: no health checks, no ``/transfer`` (contract §2).
SHARDLESS = ("transfer", "unhealthy", "ack-hang")
FLOOD_CONNECTIONS = 500


@dataclass
class Timings:
    lease: float = 3.0
    renew: float = 2.0
    retry: float = 0.5

    @property
    def flags(self) -> tuple[str, ...]:
        return (
            f"--lease-duration={self.lease:g}s",
            f"--renew-deadline={int(self.renew * 1000)}ms",
            f"--retry-period={int(self.retry * 1000)}ms",
        )


@dataclass
class Crash:
    who: str
    pid: int
    returncode: int | None
    detail: str


@dataclass
class Outcome:
    report: Report
    crashes: list[Crash]
    log_problems: list[str]
    shutdown_seconds: dict[str, float]
    start: float
    end: float
    recorder_lag: float
    file_versions: int
    extra: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> str:
        lines = [
            f"chaos run: {self.end - self.start:.0f}s, {self.file_versions} state-file versions, "
            f"recorder max pause {self.recorder_lag * 1000:.0f} ms",
            self.report.summary(),
            f"crashes: {len(self.crashes)}"
            + "".join(
                f"\n  {c.who} pid {c.pid} rc={c.returncode}: {c.detail}" for c in self.crashes
            ),
            *(
                [
                    f"churn: {self.extra['joined']} candidates joined, {self.extra['retired']} "
                    f"left for good; {self.extra['early_terms']} SIGTERMs came before the "
                    "process caught SIGTERM (its default ended it: not judged)"
                ]
                if self.extra.get("joined")
                else []
            ),
            *(
                [
                    f"pods: {self.extra['pods'][0]} to {self.extra['pods'][1]} candidates "
                    f"over the run; shard drains acknowledged by the apps: "
                    f"{self.extra['drain_acks']} of {self.extra['drains']} seen"
                ]
                if self.extra.get("shards", 1) > 1
                else []
            ),
            f"log problems: {len(self.log_problems)}"
            + "".join(f"\n  {p}" for p in self.log_problems[:20]),
            "graceful shutdown took: "
            + ", ".join(f"{k} {v:.2f}s" for k, v in sorted(self.shutdown_seconds.items())),
        ]
        return "\n".join(lines)


class ChaosRun:
    def __init__(
        self,
        cluster: ControlPlane,
        namespace: str,
        workdir: Path,
        *,
        sidecars: int = 4,
        timings: Timings | None = None,
        seed: int | None = None,
        log: Callable[[str], None] = print,
        leader_bias: float | None = None,
        gap: tuple[float, float] = (1.5, 4.0),
        old: int = 0,
        old_command: list[str] | None = None,
        lazy_apps: bool = False,
        churn_seconds: tuple[float, float] = (6.0, 12.0),
        churn_leader: float = 0.25,
        churn_every: tuple[float, float] = (0.5, 2.0),
        shards: int = 1,
        population: tuple[int, int] | None = None,
        ack_drains: float = 0.7,
    ):
        """``leader_bias``: how often a process or network fault picks the current
        leader (default: 0.6 for process faults, 0.5 for network ones); a higher
        one means more handovers per hour. ``gap``: seconds between faults.
        ``old``: how many candidates run ``old_command`` (an older sidecar's
        argv prefix, ``versions.old_command()``) instead of today's; the witness
        never does. ``lazy_apps``: see the module docstring. ``churn_seconds``:
        how long a ``churn`` fault lasts; ``churn_leader``: how often one of its
        departures is the leader's (a rolling update reaches the leader's pod too);
        ``churn_every``: seconds between its steps. ``shards``: each candidate runs
        ``--shards`` that many (1: a plain election). ``population``: the fewest and the
        most candidates the churn keeps (default: one either side of ``sidecars``).
        ``ack_drains``: how often a sharded app acknowledges a shard's drain at once."""
        self.cluster = cluster
        self.leader_bias = leader_bias
        self.gap = gap
        self.namespace = namespace
        self.workdir = workdir
        self.timings = timings or Timings()
        self.seed = seed if seed is not None else random.randrange(1 << 30)
        self.rng = random.Random(self.seed)
        self.say = log
        self.loop = proxy_loop()
        self.proxies: dict[str, FaultProxy] = {}
        self.procs: dict[str, SidecarProcess] = {}
        self.faults: list[Fault] = []
        self.crashes: list[Crash] = []
        self.expected_exit: set[int] = set()  # pids we killed on purpose
        self.shutdown_seconds: dict[str, float] = {}
        self.admin = json.loads(Path(cluster.kubeconfig).read_text())
        self.upstream_port = int(cluster.server.rsplit(":", 1)[1])
        assert old < sidecars and (old == 0 or old_command), "old sidecars need a command"
        assert shards == 1 or not (old or lazy_apps), "older or lazy sidecars take no shards"
        self.shards = shards
        low, high = population or (max(2, sidecars - 1), sidecars + 1)
        assert 2 <= low <= sidecars <= high, "the population must hold the first candidates"
        self.population_range = (low, high)
        self.pods_seen = (sidecars, sidecars)  # the fewest and the most candidates at once
        self.ack_drains = ack_drains
        self.ack_rng = random.Random(self.seed + 7)  # the acknowledging thread's own
        self.drains_seen: dict[tuple[str, int, int], bool] = {}  # (who, shard, token): acked
        self._acking = threading.Event()
        self._acker = threading.Thread(target=self._acknowledge, name="shard-apps", daemon=True)
        self.old: set[str] = set()
        self.lazy: set[str] = set()
        self.apps: dict[str, HealthApp] = {}  # today's candidates' apps (``moves``)
        self.acks: list[Ack] = []
        self.lazy_apps = lazy_apps
        self.population = sidecars
        self.old_count, self.old_command = old, old_command
        self.churn_seconds = churn_seconds
        self.churn_leader = churn_leader
        self.churn_every = churn_every
        self.joined = 0  # candidates the churn started under new names
        self.early_terms = 0  # churn SIGTERMs that came before the process caught SIGTERM
        #: candidates stopped for good (by the churn): their logs are judged too
        self.retired: dict[str, SidecarProcess] = {}
        for i in range(sidecars):
            is_old = i >= sidecars - old
            self._candidate(f"old-{i}" if is_old else f"pod-{i}", old_command if is_old else None)
        self.witness = "pod-0"
        self.recorder = Recorder([self._target(who) for who in self.procs])
        self.start_time = 0.0

    def _candidate(self, who: str, old_command: list[str] | None = None) -> SidecarProcess:
        """A candidate with its own proxy and kubeconfig, not started (``old_command``: an
        older sidecar's argv prefix)."""
        proxy = FaultProxy(
            self.loop, "127.0.0.1", self.upstream_port, seed=self.seed + len(self.proxies)
        ).start()
        kubeconfig = self.workdir / f"{who}.kubeconfig"
        doc = json.loads(json.dumps(self.admin))
        doc["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
        kubeconfig.write_text(json.dumps(doc))
        self.proxies[who] = proxy
        extra = self.timings.flags
        if self.shards > 1:
            extra = (*extra, f"--shards={self.shards}")  # no health check: refused with shards
        elif old_command is None:
            if who not in self.apps:
                self.apps[who] = HealthApp()
            extra = (*extra, *self.apps[who].flags)
        if self.lazy_apps and old_command is None:
            extra = (*extra, "--release=after-valid-until")
            self.lazy.add(who)
        proc = SidecarProcess(self.workdir, kubeconfig, self.namespace, who, extra=extra)
        if old_command is not None:
            proc.args[:1] = old_command
            self.old.add(who)
        self.procs[who] = proc
        return proc

    def _target(self, who: str) -> Target:
        proc = self.procs[who]
        return Target(who, proc.state_dir / "state.json", proc.port, self._pid_of(who))

    def _pid_of(self, who: str) -> Callable[[], int | None]:
        def pid() -> int | None:
            found = self.procs.get(who) or self.retired.get(who)
            proc = found.proc if found is not None else None
            return proc.pid if proc is not None and proc.poll() is None else None

        return pid

    # ---- lifecycle ---------------------------------------------------------
    def start(self) -> None:
        self.start_time = time.time()
        self.recorder.start()
        for proc in self.procs.values():
            proc.start()
        if self.shards > 1:
            self._acker.start()
        deadline = time.monotonic() + 30
        while self.recorder.leader_now() is None or not self._all_published():
            if time.monotonic() > deadline:
                raise AssertionError(
                    "no leader, or a sidecar without a state file, 30 s after start"
                )
            time.sleep(0.05)

    def _all_published(self) -> bool:
        """Every sidecar has published a holder (it has read the Lease) before any fault.

        (A loaded machine starts them seconds apart: a Lease deleted under the first
        leader before the last one even started is a different scenario, a candidate
        that never saw the Lease, and an older sidecar creates it at once there.)
        """
        seen = {
            v.who
            for v in list(self.recorder.versions)
            if v.holder or any(e.holder for e in v.shards or ())
        }
        return seen >= set(self.procs)

    def run(
        self,
        seconds: float,
        every_kind_first: bool = True,
        menu: tuple[str, ...] = KINDS,
        kinds: tuple[str, ...] = KINDS,
        handovers: int = 0,
        enough: int = 0,
    ) -> None:
        """Inject faults until ``seconds`` have passed (the last fault may overrun a little).

        ``every_kind_first`` plays each of ``kinds`` once (random order) before
        drawing from ``menu``, and all of them even when that takes longer than
        ``seconds`` (a loaded machine makes the cluster restarts slow).
        ``handovers``: go on past ``seconds`` (up to twice as long again) until
        leadership has moved that often, so that a seed whose faults happened
        to miss the leader still exercises what its test claims to.
        ``enough``: stop before ``seconds`` once the claims show that many
        acquisitions (the long run's target; every kind still played first), and
        say how many there are every 20 faults.
        """
        start = time.monotonic()
        deadline = start + seconds
        overrun = start + 3 * seconds
        if self.shards > 1:
            menu = tuple(k for k in menu if k not in SHARDLESS)
            kinds = tuple(k for k in kinds if k not in SHARDLESS)
        plan = list(kinds) if every_kind_first else []
        self.rng.shuffle(plan)
        while (
            plan
            or time.monotonic() < deadline
            or (time.monotonic() < overrun and self._handovers() < handovers)
        ):
            progress = bool(enough and self.faults) and len(self.faults) % 20 == 0
            if progress or (enough and not plan):
                got = self._acquisitions()
                if progress:
                    self.say(f"{got} acquisitions after {len(self.faults)} faults")
                if not plan and got >= enough:
                    break
            kind = plan.pop(0) if plan else self.rng.choice(menu)
            self._check_alive()
            self.inject(kind)
            time.sleep(self.rng.uniform(*self.gap))
        self._check_alive()

    def _handovers(self) -> int:
        if self.shards > 1:
            per = shard_claims(self.recorder.snapshot(), self.lazy, self.acks)
            return sum(handovers_of(c) for c in per.values())
        return handovers_of(claims_of(self.recorder.snapshot(), self.lazy, self.acks))

    def _acquisitions(self) -> int:
        """How many acquisitions the claims show so far (sharded: shard acquisitions)."""
        if self.shards > 1:
            per = shard_claims(self.recorder.snapshot(), self.lazy, self.acks)
            return sum(token_acquisitions(c) for c in per.values())
        return acquisitions_of(claims_of(self.recorder.snapshot(), self.lazy, self.acks))

    def _acknowledge(self) -> None:
        """The sharded apps: each reads its file (the recorder's latest read of it) and
        acknowledges a shard's drain at once ``ack_drains`` of the time (decided once per
        drain), as an app that has stopped acting on the shard does; the others let the
        drain run to its deadline."""
        while not self._acking.wait(0.02):
            for who, version in list(self.recorder.latest.items()):
                proc = self.procs.get(who)
                if proc is None:
                    continue
                for e in version.shards or ():
                    if e.drain is None or (key := (who, e.shard, e.drain)) in self.drains_seen:
                        continue
                    self.drains_seen[key] = ack = self.ack_rng.random() < self.ack_drains
                    if ack:
                        post(proc.port, f"/drained?shard={e.shard}&token={e.drain}")

    def finish(self) -> Outcome:
        """Heal everything, require a leader, stop every sidecar gracefully, and judge."""
        for proxy in self.proxies.values():
            proxy.set("pass")
        self._check_alive()
        deadline = time.monotonic() + 4 * self.timings.lease + 10
        while self._leader() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        healed_leader = self._leader()
        self._acking.set()  # the apps acknowledge nothing more: the shutdown's drains run out
        shutdown_started = time.time()
        for who, proc in self.procs.items():
            assert proc.proc is not None
            self.expected_exit.add(proc.proc.pid)
            t0 = time.monotonic()
            proc.signal(signal.SIGTERM)
            try:
                rc = proc.wait(20)
            except Exception:
                rc = None
                proc.stop()
            self.shutdown_seconds[who] = time.monotonic() - t0
            if rc != 0:
                self.crashes.append(Crash(who, proc.proc.pid, rc, "final SIGTERM did not exit 0"))
        time.sleep(0.2)
        end = time.time()
        self.recorder.stop()
        for proxy in self.proxies.values():
            proxy.close()
        self.loop.close()
        logs, problems = self._logs()
        report = check(
            versions=self.recorder.versions,
            probes=self.recorder.probes,
            faults=self.faults,
            resources=self.recorder.resources,
            logs=logs,
            start=self.start_time,
            end=end,
            lease_duration=self.timings.lease,
            torn_reads=self.recorder.torn_reads,
            gaps_until=shutdown_started,
            lazy=self.lazy,
            untokened=self.old,
            acks=self.acks,
        )
        for app in self.apps.values():
            app.close()
        return Outcome(
            report=report,
            crashes=self.crashes,
            log_problems=problems,
            shutdown_seconds=self.shutdown_seconds,
            start=self.start_time,
            end=end,
            recorder_lag=self.recorder.max_file_lag,
            file_versions=len(self.recorder.versions),
            extra={
                "seed": self.seed,
                "leader_after_healing": healed_leader,
                "joined": self.joined,
                "retired": len(self.retired),
                "early_terms": self.early_terms,
                "shards": self.shards,
                "pods": self.pods_seen,
                "drains": len(self.drains_seen),
                "drain_acks": sum(self.drains_seen.values()),
            },
        )

    def abort(self) -> None:
        """Best-effort cleanup when something raised: no process or proxy left behind."""
        self._acking.set()
        for proc in [*self.procs.values(), *self.retired.values()]:
            proc.stop()
        self.recorder.stop()
        for proxy in self.proxies.values():
            proxy.close()
        for app in self.apps.values():
            app.close()
        self.loop.close()

    # ---- faults ----------------------------------------------------------------
    def inject(self, kind: str) -> Fault:
        t = self.timings
        rng = self.rng
        leader = self._leader()
        start = time.time()
        detail = ""
        if kind in PROCESS_KINDS:
            candidates = [w for w in self.procs if w != self.witness]
            bias = 0.6 if self.leader_bias is None else self.leader_bias
            target = (
                leader if leader in candidates and rng.random() < bias else rng.choice(candidates)
            )
        elif kind in ("partition", "transfer", "unhealthy", "ack-hang"):
            target = leader or self._wait_leader() or rng.choice(list(self.procs))
        elif kind == "deleted-paused":
            # The witness takes no process fault: then a follower sleeps through it.
            others = [w for w in self.procs if w != self.witness]
            target = leader if leader in others else rng.choice(others)
        elif kind in ("apiserver", "etcd", "restore", "restore-bump", "lease-rollback"):
            target = "cluster"
        elif kind == "churn":
            target = "roster"
        else:
            bias = 0.5 if self.leader_bias is None else self.leader_bias
            target = leader if leader and rng.random() < bias else rng.choice(list(self.procs))
        was_leader = target == leader
        proc = self.procs.get(target)

        if kind == "sigkill":
            assert proc is not None and proc.proc is not None
            self.expected_exit.add(proc.proc.pid)
            proc.signal(signal.SIGKILL)
            proc.wait(10)
            time.sleep(rng.uniform(0.5, 2.5))
            proc.start()
        elif kind == "sigterm":
            assert proc is not None and proc.proc is not None
            pid = proc.proc.pid
            self.expected_exit.add(pid)
            t0 = time.monotonic()
            proc.signal(signal.SIGTERM)
            try:
                rc: int | None = proc.wait(20)
            except Exception:
                rc = None
                proc.stop()
            took = time.monotonic() - t0
            detail = f"exit {rc} after {took:.2f}s"
            if rc != 0:
                self.crashes.append(Crash(target, pid, rc, f"SIGTERM: {detail}"))
            time.sleep(rng.uniform(0.2, 1.5))
            proc.start()
        elif kind == "sigstop":
            assert proc is not None
            pause = t.lease + rng.uniform(0.5, 2.0)
            detail = f"paused {pause:.1f}s"
            proc.signal(signal.SIGSTOP)
            time.sleep(pause)
            proc.signal(signal.SIGCONT)
        elif kind == "sigstop-short":
            assert proc is not None
            pause = rng.uniform(t.renew, t.lease + 0.3)
            detail = f"paused {pause:.1f}s"
            proc.signal(signal.SIGSTOP)
            time.sleep(pause)
            proc.signal(signal.SIGCONT)
        elif kind == "apiserver":
            # Half graceful (SIGTERM), half a crash (SIGKILL): both are restarts a cluster sees.
            sig = signal.SIGTERM if rng.random() < 0.5 else signal.SIGKILL
            detail = signal.Signals(sig).name
            t0 = time.monotonic()
            self.cluster.stop_process("kube-apiserver", sig)
            detail += f", stopped in {time.monotonic() - t0:.1f}s"
            time.sleep(rng.uniform(0, 1))
            t0 = time.monotonic()
            self.cluster.start_apiserver()
            detail += f", ready in {time.monotonic() - t0:.1f}s"
        elif kind == "etcd":
            sig = signal.SIGTERM if rng.random() < 0.5 else signal.SIGKILL
            detail = signal.Signals(sig).name
            self.cluster.stop_process("etcd", sig)
            time.sleep(rng.uniform(0, 1))
            self.cluster.start_etcd()
            self.cluster.wait_ready(120)
        elif kind == "partition":
            hold = t.lease + rng.uniform(1.0, 3.0)
            detail = f"blackhole {hold:.1f}s"
            self.proxies[target].set("blackhole")
            time.sleep(hold)
            self.proxies[target].set("pass")
        elif kind == "delay":
            delay, hold = rng.uniform(0.2, 1.5), rng.uniform(2.0, 5.0)
            detail = f"{delay:.2f}s each way for {hold:.1f}s"
            self.proxies[target].set("delay", delay=delay)
            time.sleep(hold)
            self.proxies[target].set("pass")
        elif kind == "drop":
            hold = rng.uniform(2.0, 5.0)
            detail = f"30% for {hold:.1f}s"
            self.proxies[target].set("drop", drop_rate=0.3)
            time.sleep(hold)
            self.proxies[target].set("pass")
        elif kind == "deleted-paused":
            assert proc is not None
            pause = t.lease + rng.uniform(0.5, 2.0)
            detail = f"paused {pause:.1f}s, lease deleted"
            leases = ["leader-main"]
            if self.shards > 1:  # the Leases of the shards the sleeper owns (else any one)
                owned = sorted(s for s, who in self.recorder.owners_now().items() if who == target)
                owned = owned or [rng.randrange(self.shards)]
                leases = [shard_lease("leader-main", s) for s in owned]
                detail += f" (shards {' '.join(map(str, owned))})"
            proc.signal(signal.SIGSTOP)
            t0 = time.monotonic()
            self.cluster.kubectl(
                "delete", "lease", "-n", self.namespace, *leases, "--ignore-not-found"
            )
            time.sleep(max(0.0, pause - (time.monotonic() - t0)))
            proc.signal(signal.SIGCONT)
        elif kind == "flood":
            assert proc is not None
            hold = rng.uniform(2.0, 5.0)
            opened = _flood(proc.port, FLOOD_CONNECTIONS, hold)
            detail = f"{opened} connections for {hold:.1f}s"
        elif kind in ("restore", "restore-bump"):
            backup = self.workdir / f"etcd-backup-{len(self.faults)}"
            self.cluster.backup_etcd(backup)
            time.sleep(rng.uniform(2.0, 6.0))  # the election moves on past the backup
            t0 = time.monotonic()
            bump = 1000 if kind == "restore-bump" else 0
            self.cluster.stop_apiserver()
            self.cluster.restore_etcd(backup, bump=bump)
            shutil.rmtree(backup, ignore_errors=True)
            detail = f"restored in {time.monotonic() - t0:.1f}s" + (
                f", revision bumped {bump}" if bump else ""
            )
        elif kind == "lease-rollback":
            detail = self._lease_rollback(rng.uniform(2.0, 6.0))
        elif kind == "skew":
            assert proc is not None
            skew = rng.choice((-1, 1)) * rng.uniform(30, 600)
            hold = rng.uniform(2, 4) * t.lease
            detail = f"clock {skew:+.0f}s for {hold:.1f}s"
            self._restart(target, skew)
            time.sleep(hold)
            self._restart(target, 0.0)
        elif kind == "churn":
            detail = self._churn(rng.uniform(*self.churn_seconds))
        elif kind in ("transfer", "ack-hang"):
            detail = self._transfer(target, hang=kind == "ack-hang")
        elif kind == "unhealthy":
            app = self.apps.get(target)
            hold = rng.uniform(1.5, 6.0)
            if app is not None:
                app.healthy = False
                time.sleep(hold)
                app.healthy = True
            detail = f"{hold:.1f}s" if app is not None else "an older sidecar: no app checked"
        elif kind == "reset":
            self.proxies[target].set("reset")
            time.sleep(rng.uniform(0.2, 1.0))
            self.proxies[target].set("pass")
        else:  # pragma: no cover
            raise ValueError(kind)
        fault = Fault(
            kind, target, start, time.time(), (detail + (" [leader]" if was_leader else "")).strip()
        )
        self.faults.append(fault)
        self.say(f"fault {kind:9} on {target:7} {fault.end - fault.start:5.1f}s {fault.detail}")
        return fault

    def _transfer(self, leader: str, hang: bool) -> str:
        """The leader's app asks for a transfer; it acknowledges the drain half the time
        (always with ``hang``, which then freezes the sidecar past the lease)."""
        proc, rng = self.procs[leader], self.rng
        if leader in self.old:
            return "an older sidecar: no transfer"
        others = [w for w in self.procs if w != leader]
        to = rng.choice(others) if others and rng.random() < 0.5 else None
        status = post(proc.port, "/transfer" + (f"?to={to}" if to else ""))[0]
        detail = f"to {to or 'the next'}: {status}"
        if status != 202:
            return detail
        if hang or rng.random() < 0.5:
            token = drain_token(str(proc.state_dir / "state.json"), 2 * self.timings.renew)
            if token is not None:
                self.acks.append(Ack(leader, token, time.time()))
                detail += f", acknowledged ({post(proc.port, f'/drained?token={token}')[0]})"
        if hang:
            pause = self.timings.lease + rng.uniform(0.5, 2.0)
            proc.signal(signal.SIGSTOP)
            time.sleep(pause)
            proc.signal(signal.SIGCONT)
            detail += f", then frozen {pause:.1f}s"
        else:
            time.sleep(self.timings.renew + 0.5)  # the move, whether acknowledged or not
        return detail

    def _churn(self, hold: float) -> str:
        """Pods come and go for ``hold`` seconds: the roster's joins and leaves meet the handovers.

        Every 0.5-2 s (``churn_every``) a candidate under a new name starts, or
        one stops for good, or both (always both at first; the population
        wanders within ``population``: by default one of its size, never below two). A leaver is the leader
        ``churn_leader`` of the time (its release names the last joiner, which
        may be starting, or stopping itself; a leading witness is cut off the
        network for a lease instead), else a follower other than the witness,
        often the newest (whom a release would name). It gets SIGTERM (must exit
        0: a follower leaves the roster first) or, one time in four, SIGKILL (it
        stays on the roster until pushed out). Leavers are waited for in the
        background; their last file goes on claiming in the checker.
        """
        rng = self.rng
        end = time.monotonic() + hold
        stopping: list[tuple[str, signal.Signals, float, bool]] = []
        joins = graceful = killed = leaders = ticks = cuts = 0
        cut_until = 0.0
        early = self.early_terms
        while ticks == 0 or time.monotonic() < end:
            if ticks:
                time.sleep(rng.uniform(*self.churn_every))
            ticks += 1
            if cut_until and time.monotonic() >= cut_until:
                self.proxies[self.witness].set("pass")
                cut_until = 0.0
            self._reap(stopping, wait=False)
            size = len(self.procs)
            low, high = self.population_range
            step = "both" if ticks == 1 else rng.choice(("join", "leave", "both", "both"))
            joiner = ""
            if step in ("join", "both") and size < high:
                # A mixed run stays mixed: a joiner is old while fewer than ``old`` are.
                is_old = len(self.old & set(self.procs)) < self.old_count
                joiner = f"{'old-' if is_old else ''}churn-{self.joined}"
                self.joined += 1
                self._candidate(joiner, self.old_command if is_old else None).start()
                self.recorder.add(self._target(joiner))
                joins += 1
                self._count_pods()
            if step not in ("leave", "both") or size <= low:
                continue
            leader = self._leader()
            # Not the one started this instant: it has not even read the Lease yet.
            others = [w for w in self.procs if w not in (self.witness, leader, joiner)]
            to_leader = leader is not None and rng.random() < self.churn_leader
            if to_leader and leader == self.witness and not cut_until:
                # The witness never stops: its link is cut for a lease instead (its node
                # leaves the network), or an election it won would hold still for good.
                self.proxies[self.witness].set("blackhole")
                cut_until = time.monotonic() + self.timings.lease + 1.0
                cuts += 1
                continue
            if to_leader and leader != self.witness:
                assert leader is not None
                leaver = leader
                leaders += 1
            elif others:
                # The newest is whom a release would name: leaving it races the hand-off.
                leaver = others[-1] if rng.random() < 0.3 else rng.choice(others)
            else:
                continue
            sig = signal.SIGKILL if rng.random() < 0.25 else signal.SIGTERM
            proc = self.procs.pop(leaver)
            self.retired[leaver] = proc
            assert proc.proc is not None
            self.expected_exit.add(proc.proc.pid)
            holds = _catches(proc.proc.pid, signal.SIGTERM)
            proc.signal(sig)
            stopping.append((leaver, sig, time.monotonic(), holds))
            graceful += sig == signal.SIGTERM
            killed += sig == signal.SIGKILL
            self._count_pods()
        if cut_until:
            time.sleep(max(0.0, cut_until - time.monotonic()))
            self.proxies[self.witness].set("pass")
        self._reap(stopping, wait=True)
        early = self.early_terms - early
        return (
            f"{joins} joined, {graceful} SIGTERM + {killed} SIGKILL left "
            f"({leaders} leaders{f', {early} SIGTERM before a handler' if early else ''}), "
            f"{f'witness cut off {cuts}x, ' if cuts else ''}"
            f"{len(self.procs)} candidates"
        )

    def _count_pods(self) -> None:
        fewest, most = self.pods_seen
        self.pods_seen = (min(fewest, len(self.procs)), max(most, len(self.procs)))

    def _reap(self, stopping: list[tuple[str, signal.Signals, float, bool]], wait: bool) -> None:
        """Candidates the churn stopped that have exited (all of them, with ``wait``):
        a SIGTERM must have exited 0 within the budget, unless it came before the
        process caught SIGTERM at all (a pod deleted as it starts: the interpreter
        had not run the line that holds it, contract §5, and the default ends it);
        then they leave the recorder."""
        for item in list(stopping):
            who, sig, t0, holds = item
            proc = self.retired[who]
            assert proc.proc is not None
            rc = proc.proc.poll()
            if rc is None and not wait:
                continue
            stuck = ""
            if rc is None:
                try:
                    rc = proc.wait(max(0.1, t0 + 20 - time.monotonic()))
                except Exception:
                    stuck = f" ({_where(proc.proc.pid)})"
                    proc.stop()
                    rc = None
            stopping.remove(item)
            if sig == signal.SIGTERM and rc == -signal.SIGTERM and not holds:
                self.early_terms += 1
            elif sig == signal.SIGTERM and rc != 0:
                took = time.monotonic() - t0
                self.crashes.append(
                    Crash(
                        who,
                        proc.proc.pid,
                        rc,
                        f"churn SIGTERM: exit {rc} after {took:.2f}s{stuck}, log: "
                        + (proc.raw_log()[-1500:] or "empty"),
                    )
                )
            self.recorder.retire(who)
            self.proxies.pop(who).close()
            if (app := self.apps.pop(who, None)) is not None:
                app.close()  # a leaver's name never comes back: its app's thread goes too

    def _lease_rollback(self, after: float) -> str:
        """Read the Lease (sharded: a random shard's), wait ``after`` seconds, write that old
        object back (a new resourceVersion)."""
        name = "leader-main"
        if self.shards > 1:
            name = shard_lease(name, self.rng.randrange(self.shards))
        got = self.cluster.kubectl(
            "get", "lease", "-n", self.namespace, name, "-o", "json", check=False
        )
        if got.returncode != 0:
            time.sleep(after)
            return "no Lease to back up"
        lease = json.loads(got.stdout)
        time.sleep(after)  # the election moves on past the copy
        meta = lease["metadata"]
        for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields", "generation"):
            meta.pop(key, None)
        doc = json.dumps(lease)
        spec = lease.get("spec", {})
        what = f"holder {spec.get('holderIdentity')!r} transitions {spec.get('leaseTransitions')}"
        done = self.cluster.kubectl("replace", "-f", "-", input=doc, check=False)
        what += f" ({name})" if self.shards > 1 else ""
        if done.returncode == 0:
            return f"wrote back {what}"
        done = self.cluster.kubectl("create", "-f", "-", input=doc, check=False)
        return f"created again {what}" if done.returncode == 0 else f"failed: {done.stderr[:100]}"

    def _restart(self, who: str, skew: float) -> None:
        """SIGTERM ``who`` (a graceful exit), then start it with its wall clock ``skew`` off."""
        proc = self.procs[who]
        assert proc.proc is not None
        pid = proc.proc.pid
        self.expected_exit.add(pid)
        proc.signal(signal.SIGTERM)
        rc = proc.wait(20)
        if rc != 0:
            self.crashes.append(Crash(who, pid, rc, f"SIGTERM before a clock change: exit {rc}"))
        time.sleep(0.1)  # the recorder reads the last file under the old clock first
        proc.env = {k: v for k, v in proc.env.items() if not k.startswith(("FAKETIME", "LD_PRE"))}
        if skew:
            proc.env.update(skewed_clock(round(skew)))
        next(t for t in self.recorder.targets if t.who == who).skew = round(skew)
        proc.start()

    def _leader(self) -> str | None:
        """The candidate that claims now, if it is still one (a candidate the churn stopped
        for good goes on claiming until its last ``valid_until``: no fault can reach it)."""
        leader = self.recorder.leader_now()
        return leader if leader in self.procs else None

    def _wait_leader(self, timeout: float = 5.0) -> str | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            leader = self._leader()
            if leader:
                return leader
            time.sleep(0.05)
        return None

    def _check_alive(self) -> None:
        """A sidecar that exited without being told to is a crash; restart it so the run goes on."""
        for who, proc in self.procs.items():
            if proc.proc is None or proc.proc.poll() is None:
                continue
            if proc.proc.pid in self.expected_exit:
                continue
            self.crashes.append(
                Crash(who, proc.proc.pid, proc.proc.returncode, proc.raw_log()[-2000:])
            )
            self.expected_exit.add(proc.proc.pid)
            proc.start()

    def _logs(self) -> tuple[list[tuple[float, str, str]], list[str]]:
        events: list[tuple[float, str, str]] = []
        problems: list[str] = []
        for who, proc in [*self.procs.items(), *self.retired.items()]:
            for line in proc.raw_log().splitlines():
                try:
                    rec = json.loads(line)
                except ValueError:
                    problems.append(f"{who}: not a JSON log line: {line[:200]}")
                    continue
                ts = parse_ts(rec.get("ts")) or 0.0
                msg = str(rec.get("msg"))
                # A shard's events name its Lease (checker: each shard's timeline has its own).
                lease, shard = rec.get("lease"), rec.get("shard")
                if isinstance(shard, int) and not isinstance(lease, str):
                    lease = shard_lease("leader-main", shard)
                of = f" ({lease})" if isinstance(lease, str) and SHARD_INFIX in lease else ""
                if rec.get("level") == "error":
                    problems.append(f"{who}: error: {line[:300]}")
                if msg == "stepped down":
                    events.append((ts, who, f"stepped down: {rec.get('reason')}{of}"))
                elif msg in (
                    "leading",
                    "holder changed",
                    "starting",
                    "shutting down",
                    "released lease",
                    "published not-leader",
                    "stopped",
                ):
                    extra = rec.get("fencing_token", rec.get("holder", ""))
                    text = f"{msg} {extra if extra is not None else ''}".strip()
                    events.append((ts, who, text + of))
                elif msg == "moving a shard":
                    events.append((ts, who, f"moving to {rec.get('to')}{of}"))
                elif rec.get("level") in ("warning", "error"):
                    text = f"{rec.get('level')}: {msg} {rec.get('error', '')}"[:160]
                    events.append((ts, who, text + of))
        return events, problems


def _catches(pid: int, sig: int) -> bool:
    """Whether process ``pid`` has a handler for ``sig`` yet (``SigCgt`` of /proc/<pid>/status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    for line in status.splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    return False


def _where(pid: int) -> str:
    """Where a process that would not exit is: its state, CPU time and kernel wait, for the report."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        wchan = Path(f"/proc/{pid}/wchan").read_text()
    except OSError as err:
        return f"no /proc entry: {err}"
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(stat[11]) + int(stat[12])) / ticks
    return f"state {stat[0]}, {cpu:.2f} s of CPU, waiting in {wchan or '-'}"


def _flood(port: int, connections: int, hold: float) -> int:
    """Open ``connections`` to a status port, each with half a request head; hold; close."""
    socks: list[socket.socket] = []
    try:
        for _ in range(connections):
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=1.0)
                sock.sendall(b"GET /leader HTTP/1.1\r\nHost: flood\r\n")
            except OSError:
                continue  # refused or cut: the server protects itself
            socks.append(sock)
        time.sleep(hold)
    finally:
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.close()
    return len(socks)
