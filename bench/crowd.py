"""One election, hundreds of candidates: mass start, graceful handovers, rollout waves (issue 38).

``python -m bench.crowd [--n 500]`` (its own control plane; writes
``results/crowd.json``), or ``python -m bench --only one-election-500`` (the
full run's control plane; RESULTS.md). For each implementation in turn
(grelmicro-sidecar, then client-go; never both at once: 500 candidates are
about 13 GB of RSS), everything stopped in between:

1. mass start: all ``n`` started back to back on an election that has no
   Lease; it ends once a leader leads, every candidate wrote its state and,
   for the sidecar, the roster's seats are taken and no join landed for
   ``JOIN_QUIET`` seconds (only ``roster.SEATS`` followers join); then a
   steady window;
2. ``HANDOVERS`` graceful handovers: SIGTERM to the leader, a fresh
   candidate started in its place;
3. ``WAVES`` rollout waves: a ``WAVE`` share of the candidates alive before
   the first wave is replaced at once (the new ones started, the old ones
   SIGTERMed), oldest first, so a full rollout replaces the leader too.

A monitor thread reads every candidate's state file four times a second: a
holder whose file stops saying "leading" (or whose term restarts) while it
was not signalled stepped down on its own, which is the question this
scenario asks; so does a candidate that exits unsignalled. The audit log
gives the rest (``crowdstats``); the API server's and etcd's CPU come from
/proc, its watch-event counters from /metrics.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from sidecar.core import roster

from . import crowdstats as stats
from .harness import (
    IMPLS,
    AuditLog,
    Candidate,
    Credentials,
    Impl,
    Pool,
    cpu_seconds,
    loadavg,
    parse_time,
    rss_mb,
    wait_until,
)
from .standalone import run_alone

N = 500
HANDOVERS = 5
WAVES = 4
WAVE = 0.25
STEADY = 60.0
#: No roster join landed for this long, with the seats taken: the joins are over.
JOIN_QUIET = 10.0
MASS_START_CAP = 900.0
WAVE_CAP = 300.0
#: Below this much available memory the scenario stops starting candidates.
MEMORY_FLOOR_MB = 2048
#: What one candidate is budgeted before starting (the sidecar's RSS, with margin).
PER_CANDIDATE_MB = 30
SCAN = 0.25
RESULTS = Path(__file__).parent / "results" / "crowd.json"


def _log(msg: str) -> None:
    print(f"[bench] {time.strftime('%H:%M:%S')} {msg}", flush=True)


def available_mb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Monitor(threading.Thread):
    """Every candidate's state file, read when it changed: leaders, terms, unsignalled ends."""

    def __init__(self, pool: Pool):
        super().__init__(daemon=True, name="crowd-monitor")
        self.pool = pool
        self.signalled: dict[str, float] = {}  # identity -> when it was sent SIGTERM
        self.states: dict[str, dict[str, Any]] = {}
        self._keys: dict[str, tuple[int, int]] = {}
        self._leading: dict[str, tuple[str, float]] = {}  # identity -> (term marker, start)
        self.terms: list[stats.Term] = []
        self.stepdowns: list[dict[str, Any]] = []
        self.exits: list[dict[str, Any]] = []
        self.min_margin: float | None = None  # valid_until - now, seen on a leader's file
        self._exited: set[str] = set()
        self._halt = threading.Event()
        self.lock = threading.Lock()

    def signal(self, cand: Candidate) -> float:
        with self.lock:
            sent = cand.signal(signal.SIGTERM)
            self.signalled[cand.identity] = sent
        return sent

    def run(self) -> None:
        while not self._halt.wait(SCAN):
            self.scan()

    def stop(self) -> None:
        self._halt.set()
        self.join(10)
        now = time.time()
        with self.lock:
            for ident, (_, start) in self._leading.items():
                self.terms.append(stats.Term(self._user(ident), start, now))
            self._leading.clear()

    def _user(self, identity: str) -> str:
        return f"bench:{self.pool.impl.key}:{identity}"

    def _read(self, cand: Candidate) -> dict[str, Any] | None:
        path = cand.state_dir / "state.json"
        try:
            st = os.stat(path)
        except OSError:
            return self.states.get(cand.identity)
        key = (st.st_ino, st.st_mtime_ns)
        if self._keys.get(cand.identity) != key:
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                return self.states.get(cand.identity)
            self._keys[cand.identity] = key
            self.states[cand.identity] = data
        return self.states.get(cand.identity)

    def scan(self) -> None:
        now = time.time()
        for cand in list(self.pool.members):
            st = self._read(cand)
            with self.lock:
                self._judge(cand, st, now)

    def _judge(self, cand: Candidate, st: dict[str, Any] | None, now: float) -> None:
        ident = cand.identity
        sent = self.signalled.get(ident)
        leading = bool(st and st.get("is_leader") and cand.alive)
        marker = str((st or {}).get("acquired_at") or (st or {}).get("updated_at"))
        was = self._leading.get(ident)
        if was is not None and (not leading or was[0] != marker):
            # When it published the step-down (its file's stamp), else when it was seen.
            stamp = (st or {}).get("updated_at") if st and not st.get("is_leader") else None
            at = parse_time(str(stamp)) if stamp else now
            self.terms.append(stats.Term(self._user(ident), was[1], min(at, sent or at)))
            del self._leading[ident]
            if stats.unsignalled(at, sent):
                why = "a new term" if leading else "file says not leading"
                if not cand.alive:
                    why = f"exited ({cand.proc.poll() if cand.proc else None})"
                if sent is not None:
                    why += f", {sent - at:.3f} s before its SIGTERM"
                self.stepdowns.append(
                    {"identity": ident, "seen": now, "at": at, "how": why, "state": st}
                )
                _log(f"  {ident} stopped leading unsignalled ({why})")
        if leading and st is not None and ident not in self._leading:
            self._leading[ident] = (marker, cand.leading_since() or now)
        if leading and st is not None and st.get("valid_until"):
            margin = parse_time(str(st["valid_until"])) - now
            self.min_margin = margin if self.min_margin is None else min(self.min_margin, margin)
        if cand.proc is not None and not cand.alive and sent is None and ident not in self._exited:
            self._exited.add(ident)
            self.exits.append({"identity": ident, "code": cand.proc.poll(), "seen": now})
            _log(f"  {ident} exited unsignalled ({cand.proc.poll()})")

    def leaders(self) -> list[Candidate]:
        with self.lock:
            ids = set(self._leading)
        return [c for c in self.pool.members if c.identity in ids and c.alive]

    def one_leader(self, timeout: float) -> Candidate:
        found: list[Candidate] = wait_until(
            lambda: ls if len(ls := self.leaders()) == 1 else None, timeout, 0.1, "one leader"
        )
        return found[0]

    def successor(self, sent: float, old: Candidate) -> tuple[Candidate, float] | None:
        for c in self.pool.members:
            st = self.states.get(c.identity)
            if c is old or not c.alive or not (st and st.get("is_leader")):
                continue
            t = c.leading_since()
            if t is not None and t >= sent - 0.001:
                return c, t
        return None


class AuditTail:
    """The roster joins landed so far (successful merge patches of the Lease, by user)."""

    def __init__(self, audit: AuditLog, impl: str, lease: str):
        self.path, self.offset = audit.path, audit.offset()
        self.user = f'"username":"bench:{impl}:'.encode()
        self.lease = f"/leases/{lease}".encode()
        self.joined: set[str] = set()
        self.last = time.time()

    def poll(self) -> None:
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        cut = data.rfind(b"\n") + 1
        self.offset += cut
        for raw in data[:cut].splitlines():
            if b'"verb":"patch"' not in raw or self.lease not in raw or self.user not in raw:
                continue
            ev = json.loads(raw)
            code = (ev.get("responseStatus") or {}).get("code")
            if ev.get("stage") == "ResponseComplete" and code == 200:
                self.joined.add(ev["user"]["username"])
                self.last = time.time()


def snapshot(plane: Any) -> dict[str, Any]:
    """The API server's and etcd's CPU seconds, its watch-event counters, the load, now."""
    out: dict[str, Any] = {"wall": time.time(), "loadavg": loadavg()}
    for name in ("kube-apiserver", "etcd"):
        proc = plane.procs.get(name)
        out[name] = cpu_seconds(proc.pid) if proc is not None else None
    wanted = {
        "apiserver_watch_events_total": "watch_events",
        "apiserver_watch_events_sizes_sum": "watch_event_bytes",
        "apiserver_terminated_watchers_total": "terminated_watchers",
    }
    counters = dict.fromkeys(wanted.values(), 0.0)
    try:
        _, body = plane.get("/metrics", timeout=30)
    except Exception as err:  # a number missing is reported as missing, not as zero
        out["metrics_error"] = repr(err)
        return out
    for line in body.decode().splitlines():
        name = line.split("{", 1)[0]
        if name in wanted and 'resource="leases"' in line:
            counters[wanted[name]] += float(line.rsplit(" ", 1)[1])
    return out | counters


def candidates_cpu(pool: Pool) -> float:
    """CPU seconds of the pool's live candidates plus every child reaped so far (the
    candidates stopped): its increase over a phase is what the candidates spent in it."""
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime + sum(cpu_seconds(c.pid) or 0.0 for c in pool.live())


def delta(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    keys = "kube-apiserver etcd candidates watch_events watch_event_bytes terminated_watchers"
    return {
        k: round(b[k] - a[k], 2) if a.get(k) is not None and b.get(k) is not None else None
        for k in keys.split()
    }


class Run:
    """One implementation through the three phases."""

    def __init__(self, impl: Impl, plane: Any, workdir: Path, creds: Credentials, audit: AuditLog):
        self.impl, self.plane, self.creds, self.audit = impl, plane, creds, audit
        self.pool = Pool(impl, "crowd", workdir, creds, prefix="crowd")
        self.lease = f"leader-{self.pool.election}"
        self.monitor = Monitor(self.pool)
        self.phases: list[tuple[stats.Phase, dict[str, Any]]] = []
        self.handovers: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self.offset = 0  # where this implementation's audit entries begin

    def spawn(self, count: int) -> list[Candidate]:
        for i in range(count):  # sign the certificates before the clock starts
            self.creds.kubeconfig(f"bench:{self.impl.key}:{self.pool.prefix}-{self.pool._next + i}")
        out = []
        for _ in range(count):
            if available_mb() < MEMORY_FLOOR_MB:
                self.notes.append(f"stopped starting candidates: under {MEMORY_FLOOR_MB} MB free")
                _log(f"  {self.notes[-1]}")
                break
            out.append(self.pool.spawn())
        return out

    def snap(self) -> dict[str, Any]:
        return snapshot(self.plane) | {"candidates": candidates_cpu(self.pool)}

    def _phase(self, name: str, begin: dict[str, Any]) -> None:
        end = self.snap()
        self.phases.append((stats.Phase(name, begin["wall"], end["wall"]), delta(begin, end)))

    def _settle(self, new: list[Candidate], tail: AuditTail | None, cap: float) -> int:
        """Wait until the new candidates wrote their state and (sidecar) the roster's seats
        are taken and joins went quiet; the seats still free when ``cap`` passed."""
        deadline = time.monotonic() + cap
        if tail is not None:
            tail.last = time.time()  # the silence is counted from this wave's start
        wait_until(
            lambda: all(c.identity in self.monitor.states or not c.alive for c in new),
            cap, 0.5, "every new candidate's state",
        )  # fmt: skip
        if tail is None:
            time.sleep(5)  # every client-go candidate polls within 2 s × 1.2
            return 0
        free = roster.SEATS
        while time.monotonic() < deadline:
            tail.poll()
            free = roster.SEATS - self._seated()
            if free <= 0 and time.time() - tail.last > JOIN_QUIET:
                return 0
            time.sleep(2)
        return free

    def _seated(self) -> int:
        """Entries of the election's roster other than its holder's, as the API server has them."""
        got = self.plane.kubectl(
            "get", "lease", self.lease, "-n", self.impl.namespace, "-o", "json", check=False
        )
        if got.returncode != 0:
            return 0
        obj = json.loads(got.stdout)
        holder = (obj.get("spec") or {}).get("holderIdentity")
        listed = roster.entries(roster.notes_of(obj), self.lease)
        return sum(who != holder for _, who, _ in listed)

    def handover(self, leader: Candidate, sent: float, timeout: float = 60) -> None:
        try:
            succ, t = wait_until(
                lambda: self.monitor.successor(sent, leader), timeout, 0.05, "a successor"
            )
        except TimeoutError:
            _log(f"  {self.impl.key}: no successor within {timeout:g}s")
            self.handovers.append({"sent": sent, "led": None, "leader": leader.identity})
            return
        self.handovers.append(
            {"sent": sent, "led": t, "successor": succ.user, "leader": leader.identity}
        )
        _log(f"  {self.impl.key} handover: {(t - sent) * 1000:.0f} ms to {succ.identity}")

    def mass_start(self, n: int) -> dict[str, Any]:
        tail = (
            AuditTail(self.audit, self.impl.key, self.lease) if self.impl.key == "sidecar" else None
        )
        begin = self.snap()
        t0 = time.time()
        new = self.spawn(n)
        _log(f"  {self.impl.key}: {len(new)} started in {time.time() - t0:.1f}s")
        self.monitor.start()
        first = self.monitor.one_leader(MASS_START_CAP)
        first_led = (first.leading_since() or time.time()) - t0
        unsettled = self._settle(new, tail, MASS_START_CAP)
        settled = time.time() - t0
        self._phase("mass start", begin)
        rss = sum(r for c in new if (r := rss_mb(c.pid)) is not None)
        _log(f"  {self.impl.key}: settled in {settled:.0f}s ({unsettled} seats free); steady ...")
        begin = self.snap()
        time.sleep(STEADY)
        self._phase("steady", begin)
        return {
            "started": len(new),
            "first_leader": first_led,
            "settled": settled,
            "unsettled": unsettled,
            "rss_total_mb": rss,
        }

    def graceful(self, count: int) -> None:
        begin = self.snap()
        for _ in range(count):
            leader = self.monitor.one_leader(60)
            sent = self.monitor.signal(leader)
            self.handover(leader, sent)
            leader.wait(20)
            leader.kill()
            new = self.spawn(1)
            self._settle(new, None, 60)
            time.sleep(random.uniform(0, 2))
        self._phase("handovers", begin)

    def waves(self, count: int, share: float) -> None:
        base = self.pool.live()
        size = max(1, int(len(base) * share))
        tail = (
            AuditTail(self.audit, self.impl.key, self.lease) if self.impl.key == "sidecar" else None
        )
        for w in range(count):
            batch = [c for c in base[w * size : (w + 1) * size] if c.alive]
            begin = self.snap()
            leaders = self.monitor.leaders()
            new = self.spawn(len(batch))
            sent_leader = None
            for c in batch:
                sent = self.monitor.signal(c)
                if c in leaders:
                    sent_leader = (c, sent)
            _log(f"  {self.impl.key} wave {w + 1}: {len(new)} started, {len(batch)} stopped"
                 + (" (the leader among them)" if sent_leader else ""))  # fmt: skip
            if sent_leader is not None:
                self.handover(*sent_leader)
            for c in batch:
                c.wait(20)
                c.kill()
            left = self._settle(new, tail, WAVE_CAP)
            if left:
                self.notes.append(f"wave {w + 1}: {left} roster seats still free")
            self._phase(f"wave {w + 1}", begin)

    def result(self, mass: dict[str, Any], load: list[float]) -> dict[str, Any]:
        time.sleep(1.0)
        prefix = f"bench:{self.impl.key}:{self.pool.prefix}-"
        reqs = [r for r in self.audit.requests(self.offset) if r.user.startswith(prefix)]
        lease_reqs = stats.on_lease(reqs, self.lease)
        terms = self.monitor.terms
        n = mass["started"]
        phases = []
        for ph, usage in self.phases:
            p = stats.phase_stats(lease_reqs, ph, terms, n)
            p["cpu"] = usage
            during = [r for r in reqs if ph.start <= r.received < ph.end]
            p["requests_all"] = len(during)
            p["by_object"] = stats.by_object(during, self.lease)
            phases.append(p)
        steady = next(p for p in phases if p["name"] == "steady")
        # A leader that had stepped down on its own before its SIGTERM made no graceful handover.
        fallen = {d["identity"] for d in self.monitor.stepdowns}
        hos = [h for h in self.handovers if h["led"] is not None and h["leader"] not in fallen]
        gaps = [p["max_renew_gap"] for p in phases if p["max_renew_gap"] is not None]
        return {
            "impl": self.impl.key,
            "n": n,
            "loadavg": load,
            "mass_start": {**mass, "cpu": next(p["cpu"] for p in phases)},
            "rss_total_mb": round(mass["rss_total_mb"], 1),
            "steady": {
                "apiserver_cpu_per_min": round(
                    (steady["cpu"]["kube-apiserver"] or 0) * 60 / steady["seconds"], 2
                ),
                "requests_per_second": round(steady["requests_all"] / steady["seconds"], 2),
            },
            "phases": phases,
            "handover_seconds": [h["led"] - h["sent"] for h in hos],
            "handovers": [
                stats.handover_stats(lease_reqs, h["sent"], h["led"], h["successor"]) for h in hos
            ],
            "no_successor": sum(h["led"] is None for h in self.handovers),
            "after_a_stepdown_seconds": [
                h["led"] - h["sent"] for h in self.handovers if h["leader"] in fallen and h["led"]
            ],
            "terms": [vars(t) for t in terms],
            "max_renew_gap": max(gaps) if gaps else None,
            "min_valid_until_margin": self.monitor.min_margin,
            "unsignalled_stepdowns": [
                d | stats.stepdown_cause(lease_reqs, self.monitor._user(d["identity"]), d["at"])
                for d in self.monitor.stepdowns
            ],
            "unexpected_exits": self.monitor.exits,
            "logged_stepdowns": self.logged_stepdowns(),
            "notes": self.notes,
        }

    def logged_stepdowns(self) -> int:
        """Step-downs the candidates logged (sidecar: "stepped down", any reason but a
        shutdown; client-go: "Failed to renew lease", but for a cancelled context)."""
        needle = '"stepped down"' if self.impl.key == "sidecar" else "Failed to renew lease"
        count = 0
        for c in self.pool.members:
            try:
                lines = c.log_path.read_text(errors="replace").splitlines()
            except OSError:
                continue
            # client-go logs it on a SIGTERM too, with the cancelled context as the error
            count += sum(needle in line and "context canceled" not in line for line in lines)
        return count

    def go(self, n: int, handovers: int, waves: int) -> dict[str, Any]:
        load = loadavg()
        self.offset = self.audit.offset()
        try:
            mass = self.mass_start(n)
            self.graceful(handovers)
            self.waves(waves, WAVE)
        finally:
            self.monitor.stop()
            self.pool.stop()
        return self.result(mass, load)


def measure(
    plane: Any,
    workdir: Path,
    creds: Credentials,
    audit: AuditLog,
    *,
    n: int = N,
    impls: tuple[str, ...] = ("sidecar", "clientgo"),
    handovers: int = HANDOVERS,
    waves: int = WAVES,
) -> dict[str, Any]:
    """Each implementation in turn; one whose memory would not fit is reported as a gap."""
    out: dict[str, Any] = {}
    for key in impls:
        need = n * PER_CANDIDATE_MB + MEMORY_FLOOR_MB
        if available_mb() < need:
            out[key] = {"gap": f"{available_mb():.0f} MB available, {need} MB needed"}
            _log(f"one election, {n} {key}: skipped, {out[key]['gap']}")
            continue
        _log(f"one election, {n} {key} candidates: mass start, {handovers} handovers, "
             f"{waves} waves of {WAVE:.0%} ...")  # fmt: skip
        out[key] = Run(IMPLS[key], plane, workdir, creds, audit).go(n, handovers, waves)
        time.sleep(5)  # the stopped candidates' memory back before the next implementation
    return out


def main(argv: list[str] | None = None) -> int:
    from .report import LABELS

    parser = argparse.ArgumentParser(prog="python -m bench.crowd", description=__doc__)
    parser.add_argument("--n", type=int, default=N)
    parser.add_argument("--handovers", type=int, default=HANDOVERS)
    parser.add_argument("--waves", type=int, default=WAVES)
    parser.add_argument("--impls", default="sidecar,clientgo")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    def scenario(plane: Any, workdir: Path, creds: Credentials, audit: AuditLog) -> Any:
        return measure(
            plane, workdir, creds, audit, n=args.n, impls=tuple(args.impls.split(",")),
            handovers=args.handovers, waves=args.waves,
        )  # fmt: skip

    crowd = run_alone("crowd", "crowd", scenario, args.out)
    print(stats.markdown(crowd, LABELS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
