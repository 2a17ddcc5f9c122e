"""The measurements: handover, crash failover, steady-state API load, footprint, scale.

Each function starts real candidate processes (``harness.Pool``), drives them
with signals, reads their state files and the audit log, and returns plain
data (dicts and lists of floats) that ``report`` turns into tables and plots.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sidecar.core.lease import format_microtime

from . import burst
from .harness import (
    IMPLS,
    AuditLog,
    Candidate,
    Credentials,
    Impl,
    Pool,
    count_in_window,
    loadavg,
    parse_time,
    rss_mb,
    user_name,
    wait_until,
)

#: The CPython floor program (``bench/floor.py``), run by the sidecar's interpreter.
FLOOR = Path(__file__).with_name("floor.py")


@dataclass
class Handover:
    impl: str
    signal: str
    round: int
    latency: float  # signal sent -> successor's first "leading" state file
    stepdown: float | None  # signal sent -> old leader's "not leading" state file
    successor: str
    leaders_at_end: int


def _log(msg: str) -> None:
    print(f"[bench] {time.strftime('%H:%M:%S')} {msg}", flush=True)


def _settle(pool: Pool, cand: Candidate, settle: float, jitter: float) -> None:
    """Let a new candidate become a real follower, then wait a random phase."""
    wait_until(lambda: cand.state() is not None, 30, 0.02, f"{cand.identity} to write its state")
    time.sleep(settle + random.uniform(0, jitter))


def _one_leader(pool: Pool, timeout: float) -> Candidate:
    leaders: list[Candidate] = wait_until(
        lambda: ls if len(ls := pool.leaders()) == 1 else None,
        timeout,
        0.02,
        f"one {pool.impl.key} leader in {pool.election}",
    )
    return leaders[0]


def handovers(
    impl: Impl,
    workdir: Path,
    creds: Credentials,
    *,
    sig: signal.Signals,
    n: int,
    count: int,
    rounds: int,
    settle: float,
    jitter: float,
    timeout: float = 60.0,
) -> list[Handover]:
    """``rounds`` fresh elections of ``n`` candidates; ``count`` handovers in each."""
    out: list[Handover] = []
    name = "term" if sig == signal.SIGTERM else "kill"
    for rnd in range(rounds):
        pool = Pool(impl, f"{name}-{rnd}", workdir, creds, prefix=f"{name}{rnd}")
        try:
            for _ in range(n):
                pool.spawn()
            _one_leader(pool, 90)
            for cand in pool.live():
                _settle(pool, cand, 0, 0)
            time.sleep(settle + random.uniform(0, jitter))
            for i in range(count):
                leader = _one_leader(pool, timeout)
                others = [c for c in pool.live() if c is not leader]
                sent = leader.signal(sig)
                stepdown: float | None = None

                def successor(
                    others: list[Candidate] = others, leader: Candidate = leader, sent: float = sent
                ) -> tuple[Candidate, float] | None:
                    nonlocal stepdown
                    if stepdown is None and sig == signal.SIGTERM:
                        st = leader.state()
                        if st and not st.get("is_leader") and st.get("updated_at"):
                            t = parse_time(str(st["updated_at"]))
                            if t >= sent - 0.001:
                                stepdown = t - sent
                    for c in others:
                        t = c.leading_since()
                        if t is not None and t >= sent - 0.001:
                            return c, t
                    return None

                try:
                    succ, t = wait_until(successor, timeout, 0.005, f"{impl.key} successor")
                except TimeoutError:
                    _log(f"  {impl.key} {name} #{i}: no successor within {timeout:g}s")
                    leader.kill()
                    continue
                if sig == signal.SIGTERM:
                    leader.wait(20)
                    if stepdown is None:
                        st = leader.state()
                        if st and not st.get("is_leader") and st.get("updated_at"):
                            stepdown = parse_time(str(st["updated_at"])) - sent
                leader.kill()
                ho = Handover(
                    impl.key,
                    name,
                    rnd,
                    t - sent,
                    stepdown,
                    succ.identity,
                    len(pool.leaders()),
                )
                out.append(ho)
                _log(
                    f"  {impl.key} {name} r{rnd} #{i}: {ho.latency * 1000:.0f} ms"
                    + (
                        f" (old leader stepped down at {stepdown * 1000:.0f} ms)"
                        if stepdown is not None
                        else ""
                    )
                )
                new = pool.spawn()
                _settle(pool, new, settle, jitter)
        finally:
            pool.stop()
    return out


def handovers_as_dicts(items: list[Handover]) -> list[dict[str, Any]]:
    return [asdict(h) for h in items]


# ---- steady state ----------------------------------------------------------
def steady_state(
    impls: list[Impl],
    workdir: Path,
    creds: Credentials,
    audit: AuditLog,
    *,
    n: int,
    duration: float,
    warmup: float,
    floor: bool = False,
) -> dict[str, Any]:
    """All implementations side by side, each in its namespace: API requests, RSS, CPU.

    ``floor``: ``bench/floor.py`` runs through the same window and its RSS is
    sampled with the candidates' (``floor_rss_mb``): asyncio, ssl and one Lease
    watch over TLS in the sidecar's interpreter, the least a Python elector costs.
    """
    pools = [Pool(impl, f"steady{n}", workdir, creds, prefix=f"s{n}") for impl in impls]
    floor_proc: subprocess.Popen[bytes] | None = None
    floor_rss = 0.0
    try:
        if floor:
            kubeconfig = creds.kubeconfig(user_name("floor", "floor"))
            floor_proc = subprocess.Popen(
                [sys.executable, str(FLOOR), str(kubeconfig), impls[0].namespace, "leader-floor"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        for pool in pools:
            for _ in range(n):
                pool.spawn()
        leaders = {pool.impl.key: _one_leader(pool, 120) for pool in pools}
        _log(f"  steady N={n}: leaders elected; warming up {warmup:g}s")
        time.sleep(warmup)
        offset = audit.offset()
        start = time.time()
        load_start = loadavg()
        cpu0 = {c.user: c.cpu_seconds() for p in pools for c in p.live()}
        rss_max: dict[str, float] = {}
        end_at = time.monotonic() + duration
        while time.monotonic() < end_at:
            for p in pools:
                for c in p.live():
                    r = c.rss_mb()
                    if r is not None:
                        rss_max[c.user] = max(rss_max.get(c.user, 0.0), r)
            if floor_proc is not None and floor_proc.poll() is None:
                floor_rss = max(floor_rss, rss_mb(floor_proc.pid) or 0.0)
            time.sleep(min(5.0, max(0.0, end_at - time.monotonic())))
        end = time.time()
        cpu1 = {c.user: c.cpu_seconds() for p in pools for c in p.live()}
        leaders_after = {p.impl.key: [c.identity for c in p.leaders()] for p in pools}
    finally:
        for pool in pools:
            pool.stop()
        if floor_proc is not None:
            floor_proc.kill()
            floor_proc.wait()
    time.sleep(1.0)
    reqs = audit.requests(offset)
    counts = count_in_window(reqs, start, end)
    minutes = (end - start) / 60
    result: dict[str, Any] = {
        "n": n,
        "window_seconds": round(end - start, 1),
        "loadavg": load_start,
        "impls": {},
    }
    if floor_proc is not None:
        # Killed at the end of the window (-9) as planned; any other end means it never
        # watched through the window, and it is not reported.
        if floor_proc.returncode == -9:
            result["floor_rss_mb"] = round(floor_rss, 1)
        else:
            _log(f"  the CPython floor program ended early ({floor_proc.returncode}); not reported")
    for pool in pools:
        key = pool.impl.key
        leader = leaders[key]
        per: list[dict[str, Any]] = []
        for c in pool.members:
            verbs = counts.get(c.user, {})
            c0, c1 = cpu0.get(c.user), cpu1.get(c.user)
            per.append(
                {
                    "identity": c.identity,
                    "role": "leader" if c is leader else "follower",
                    "per_minute": {
                        v: round(k / minutes, 2) for v, k in verbs.items() if v != "watch (open)"
                    },
                    "open_watches": verbs.get("watch (open)", 0),
                    "requests_per_minute": round(
                        sum(k for v, k in verbs.items() if v != "watch (open)") / minutes, 2
                    ),
                    "rss_mb": round(rss_max.get(c.user, 0.0), 1),
                    "cpu_s_per_min": round((c1 - c0) / minutes, 3)
                    if c0 is not None and c1 is not None
                    else None,
                }
            )
        followers = [p for p in per if p["role"] == "follower"]
        lead = next(p for p in per if p["role"] == "leader")
        result["impls"][key] = {
            "candidates": per,
            "leader_stable": leaders_after[key] == [leader.identity],
            "user_agents": sorted({r.agent for r in reqs if r.user.startswith(f"bench:{key}:")}),
            "namespace": pool.impl.namespace,
            "leader_per_minute": lead["per_minute"],
            "leader_requests_per_minute": lead["requests_per_minute"],
            "follower_requests_per_minute_mean": round(
                statistics.fmean(f["requests_per_minute"] for f in followers), 2
            )
            if followers
            else 0.0,
            "follower_per_minute_mean": _mean_verbs([f["per_minute"] for f in followers]),
            "per_candidate_requests_per_minute": round(
                statistics.fmean(p["requests_per_minute"] for p in per), 2
            ),
            "total_requests_per_minute": round(sum(p["requests_per_minute"] for p in per), 2),
            "rss_mb_max": max(p["rss_mb"] for p in per),
            "rss_mb_leader": lead["rss_mb"],
            "cpu_s_per_min_leader": lead["cpu_s_per_min"],
            "cpu_s_per_min_follower_mean": round(
                statistics.fmean(f["cpu_s_per_min"] or 0.0 for f in followers), 3
            )
            if followers
            else None,
        }
    return result


def _mean_verbs(items: list[dict[str, float]]) -> dict[str, float]:
    if not items:
        return {}
    verbs = sorted({v for d in items for v in d})
    return {v: round(sum(d.get(v, 0.0) for d in items) / len(items), 2) for v in verbs}


# ---- start-up ---------------------------------------------------------------
def startup(
    impl: Impl, workdir: Path, creds: Credentials, runs: int, *, free: bool = False
) -> list[dict[str, float]]:
    """Process start to leading, and the RSS once leading.

    Without ``free``: a brand-new election, no Lease yet (what a user meets after
    ``kubectl apply``), which the sidecar claims at once (a first term, contract
    §2). ``free``: the Lease exists and is released, as a graceful exit leaves it;
    the sidecar, which did not see that release, waits it out for one lease
    duration (a restore may have brought it back, contract §2).
    """
    out = []
    kind = "free" if free else "none"
    for i in range(runs):
        pool = Pool(impl, f"start-{kind}-{i}", workdir, creds, prefix=f"start{kind}{i}")
        try:
            if free:
                creds.plane.kubectl(
                    "apply", "-n", impl.namespace, "-f", "-",
                    input=json.dumps(released_lease(f"leader-{pool.election}")),
                )  # fmt: skip
            cand = pool.spawn()
            t: float = wait_until(cand.leading_since, 30, 0.005, f"{impl.key} to lead")
            time.sleep(1.0)
            out.append({"seconds": t - cand.started_wall, "rss_mb": cand.rss_mb() or 0.0})
            _log(f"  {impl.key} start #{i} ({kind} lease): {out[-1]['seconds'] * 1000:.0f} ms")
        finally:
            pool.stop()
    return out


def released_lease(name: str) -> dict[str, Any]:
    """A Lease as a graceful release leaves it: no holder, a 1 s duration, renewed a minute ago."""
    stamp = format_microtime(dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1))
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "grelmicro"}},
        "spec": {"holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": stamp},
    }


# ---- scale ------------------------------------------------------------------
def one_big_election(
    impl: Impl,
    workdir: Path,
    creds: Credentials,
    audit: AuditLog,
    *,
    n: int,
    window: float,
    count: int,
) -> dict[str, Any]:
    """``n`` candidates in one election: the API request rate, then ``count`` handovers."""
    pool = Pool(impl, "big", workdir, creds, prefix="big")
    latencies: list[float] = []
    # Per handover: [SIGTERM, successor leads + 0.5 s) and the successor's user name.
    windows: list[tuple[float, float, str]] = []
    # Per handover: CPU seconds of every candidate but the stopping leader over that window.
    followers_cpu: list[float] = []
    try:
        for _ in range(n):
            pool.spawn()
        _one_leader(pool, 180)
        wait_until(lambda: all(c.state() is not None for c in pool.members), 180, 0.2, "all states")
        time.sleep(10)
        offset, start = audit.offset(), time.time()
        time.sleep(window)
        end = time.time()
        for i in range(count):
            leader = _one_leader(pool, 60)
            others = [c for c in pool.live() if c is not leader]
            cpu_before = _cpu(others)
            sent = leader.signal(signal.SIGTERM)

            def successor(others: list[Candidate] = others, sent: float = sent) -> float | None:
                for c in others:
                    t = c.leading_since()
                    if t is not None and t >= sent - 0.001:
                        return t
                return None

            try:
                t = wait_until(successor, 60, 0.02, "successor")
            except TimeoutError:
                _log(f"  {impl.key} scale-{n} #{i}: no successor within 60s")
                continue
            latencies.append(t - sent)
            time.sleep(max(0.0, t + 0.5 - time.time()))
            followers_cpu.append(round(_cpu(others) - cpu_before, 4))
            led = next((c.user for c in others if c.leading_since() == t), "")
            windows.append((sent, t + 0.5, led))
            _log(f"  {impl.key} {n} candidates, handover #{i}: {(t - sent) * 1000:.0f} ms")
            leader.wait(20)
            leader.kill()
            new = pool.spawn()
            _settle(pool, new, 3, 2)
    finally:
        pool.stop()
    time.sleep(1.0)
    reqs = [r for r in audit.requests(offset) if r.user.startswith(f"bench:{impl.key}:big")]
    counts = count_in_window(reqs, start, end)
    total = sum(k for verbs in counts.values() for v, k in verbs.items() if v != "watch (open)")
    verbs: dict[str, int] = {}
    for per in counts.values():
        for v, k in per.items():
            if v != "watch (open)":
                verbs[v] = verbs.get(v, 0) + k
    lease = f"/leases/leader-{pool.election}"  # every contestant's Lease for the election
    # Claims and releases: creates and updates. A merge patch is a candidate joining or
    # leaving the election's roster (annotations of this Lease: the candidate started after
    # the last handover), never a claim; counted apart.
    patches = [r for r in reqs if r.verb == "patch" and r.uri.split("?")[0].endswith(lease)]
    writes = [
        r for r in reqs if r.verb in ("create", "update") and r.uri.split("?")[0].endswith(lease)
    ]
    per_handover = []
    for begin, finish, successor in windows:
        during = sorted(
            (r for r in writes if begin <= r.received < finish), key=lambda r: r.received
        )
        # The successor's first write is its claim; a later one in the window is a renew.
        claim = next((r for r in during if r.user == successor and r.code == 200), None)
        per_handover.append(
            [r for r in during if r.user != successor or r is claim or r.code != 200]
        )
    return {
        "n": n,
        "window_seconds": round(end - start, 1),
        "requests_per_second": round(total / (end - start), 3),
        "per_verb_per_second": {v: round(k / (end - start), 3) for v, k in sorted(verbs.items())},
        "handover_seconds": latencies,
        # Writes to the election's Lease from the SIGTERM until 0.5 s after the successor
        # led (the release and every claim; the successor's renews left out), and 409s.
        "handover_lease_writes": [len(w) for w in per_handover],
        "handover_conflicts": [sum(r.code == 409 for r in w) for w in per_handover],
        # CPU seconds of all the other candidates, from the SIGTERM until 0.5 s after the
        # successor led (``harness.cpu_seconds``: utime + stime of each process).
        "handover_followers_cpu_seconds": followers_cpu,
        "handover_roster_patches": [
            sum(begin <= r.received < finish for r in patches) for begin, finish, _ in windows
        ],
    }


def _cpu(cands: list[Candidate]) -> float:
    """CPU seconds used so far by ``cands`` together (a process gone counts nothing)."""
    return sum(c.cpu_seconds() or 0.0 for c in cands)


def many_elections(
    impl: Impl,
    workdir: Path,
    creds: Credentials,
    audit: AuditLog,
    *,
    elections: int,
    per_election: int,
    window: float,
) -> dict[str, Any]:
    """``elections`` elections side by side: the API request rate, then every leader SIGTERMed at once."""
    pools = [Pool(impl, f"many-{i}", workdir, creds, prefix=f"m{i}") for i in range(elections)]
    latencies: list[float] = []
    rounds: list[burst.Round] = []
    cpu_used: dict[str, float] = {}
    missing = 0
    stuck: list[dict[str, Any]] = []
    started = time.monotonic()
    try:
        for pool in pools:
            for _ in range(per_election):
                pool.spawn()
        for pool in pools:
            _one_leader(pool, 300)
        for pool in pools:
            for c in pool.members:
                wait_until(lambda c=c: c.state() is not None, 120, 0.1, "state")
        _log(f"  {impl.key}: {elections} elections up in {time.monotonic() - started:.0f}s")
        time.sleep(15)
        offset, start = audit.offset(), time.time()
        load = loadavg()
        time.sleep(window)
        end = time.time()
        plan = []
        for pool in pools:
            leader = _one_leader(pool, 60)
            others = [c for c in pool.live() if c is not leader]
            if not others:  # a candidate died before the handover: say so, do not wait for it
                dead = [c for c in pool.members if not c.alive]
                _log(f"  {impl.key} {pool.election}: no live follower before the handover")
                stuck.append(
                    {
                        "election": pool.election,
                        "reason": "no live follower before the handover",
                        "exit_codes": {c.identity: c.proc.poll() if c.proc else None for c in dead},
                        "logs": _tails(dead),
                    }
                )
            plan.append((pool, leader, others))
        sent_at = {}
        cpu = burst.Cpu(
            {"successors": [c.pid for p in plan for c in p[2]], **burst.plane_pids(creds.plane)},
            [leader.pid for _, leader, _ in plan],
        )
        for pool, leader, _ in plan:
            sent_at[pool.election] = leader.signal(signal.SIGTERM)
        pending = [p for p in plan if p[2]]
        deadline = time.monotonic() + 90
        while pending and time.monotonic() < deadline:
            still = []
            for pool, leader, others in pending:
                sent = sent_at[pool.election]
                ts = [
                    (t, c)
                    for c in others
                    if (t := c.leading_since()) is not None and t >= sent - 0.001
                ]
                if ts:
                    t, succ = min(ts, key=lambda x: x[0])
                    latencies.append(t - sent)
                    rounds.append(burst.Round(pool.election, sent, leader.user, succ.user, t, None))
                else:
                    still.append((pool, leader, others))
            pending = still
            time.sleep(0.05)
        for _, leader, _ in plan:
            leader.wait(20)
        cpu_used = cpu.after()
        leaders = {leader.user: leader for _, leader, _ in plan}
        for rd in rounds:
            st = leaders[rd.leader].state()
            if st and not st.get("is_leader") and st.get("updated_at"):
                rd.stepdown = parse_time(str(st["updated_at"]))
        missing = len(pending) + sum(1 for p in plan if not p[2])
        for pool, leader, others in pending:
            states = {
                c.identity: {
                    "alive": c.alive,
                    "exit": c.proc.poll() if c.proc else None,
                    "state": c.state(),
                }
                for c in [leader, *others]
            }
            _log(f"  {impl.key} {pool.election}: no successor within 90 s; states: {states}")
            stuck.append(
                {"election": pool.election, "states": states, "logs": _tails([leader, *others])}
            )
    finally:
        teardown = time.time()  # the burst's requests are counted until here at most
        for pool in pools:
            for c in pool.live():
                c.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        for pool in pools:
            pool.stop()
    time.sleep(1.0)
    # Leaders that stepped down on their own (renew deadline) while the processes were
    # starting or running: overload evidence, from the sidecar's JSON logs.
    deadline_stepdowns = 0
    for pool in pools:
        for c in pool.members:
            try:
                text = c.log_path.read_text(errors="replace")
            except OSError:
                continue
            deadline_stepdowns += text.count("renew deadline passed")
    prefix = f"bench:{impl.key}:m"
    reqs = [r for r in audit.requests(offset) if r.user.startswith(prefix)]
    counts = count_in_window(reqs, start, end)
    total = sum(k for verbs in counts.values() for v, k in verbs.items() if v != "watch (open)")
    # Until the last successor led + 1 s, but not into the final shutdown of the successors,
    # whose releases, lookups and Events are not the burst's (they were counted before).
    last_led = max((r.led for r in rounds), default=0.0)
    profile = burst.profile(rounds, reqs, min(last_led + 1.0, teardown))
    return {
        "burst": {**profile, "cpu": cpu_used},
        "elections": elections,
        "candidates_per_election": per_election,
        "window_seconds": round(end - start, 1),
        "loadavg": load,
        "requests_per_second": round(total / (end - start), 3),
        "handover_seconds": latencies,
        "no_successor": missing,
        "no_successor_detail": stuck,
        "renew_deadline_stepdowns": deadline_stepdowns if impl.key == "sidecar" else None,
    }


def _tails(cands: list[Candidate], lines: int = 15) -> dict[str, list[str]]:
    out = {}
    for c in cands:
        try:
            out[c.identity] = c.log_path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            out[c.identity] = []
    return out


__all__ = [
    "IMPLS",
    "Handover",
    "handovers",
    "many_elections",
    "one_big_election",
    "startup",
    "steady_state",
]
