"""``python -m bench [--quick]``: every benchmark, one command, against the embedded control plane.

Installs what it needs (matplotlib into this venv, the peers into their cache),
starts a control plane in a throwaway directory, runs the scenarios in order,
and writes ``bench/results/latest.json``, ``bench/RESULTS.md`` and the PNGs in
``bench/results/``. ``--report-only`` redraws from an existing ``latest.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .provenance import machine, source

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"


@dataclass(frozen=True)
class Plan:
    mode: str
    handover_rounds: int
    handover_count: int  # per round, sidecar / client-go / grelmicro
    official_count: int  # per round (each takes a lease duration)
    settle: float
    crash_count: int
    steady_seconds: float
    steady_warmup: float
    startup_runs: int
    big_n: int
    big_window: float
    big_handovers: int
    many_elections: int
    many_window: float
    scale_impls: tuple[str, ...]
    pod_rounds: int = 0  # real pods (bench.pods): leader deletions and rollouts per way; 0 skips
    sweep_pods: int = 0  # bench.sweep: pods stopping at once among its LEASES; 0 skips
    first_runs: int = 3  # bench.first: fresh elections of FIRST_N candidates started at once
    crowd_n: int = 0  # bench.crowd: candidates of one election (one-election-500); 0 skips
    thousand: int = 0  # bench.thousand: elections × 3 at steady state (thousand-elections); 0 skips


#: Candidates started at once on a brand-new election (as the pods' 3 replicas).
FIRST_N = 3


FULL = Plan(
    "full", 2, 12, 10, 2.0, 6, 150, 20, 5, 50, 60, 10, 200, 60, ("sidecar", "clientgo"), 10, 50,
    crowd_n=500, thousand=1000,
)  # fmt: skip
QUICK = Plan("quick", 1, 5, 2, 1.5, 2, 30, 10, 2, 10, 15, 3, 20, 15, ("sidecar", "clientgo"))


def _log(msg: str) -> None:
    print(f"[bench] {time.strftime('%H:%M:%S')} {msg}", flush=True)


def ensure_matplotlib() -> None:
    """The bench extra's requirements, not ``-e <tree>[bench]``: run from a git worktree with
    the main checkout's venv, that re-pointed the venv's editable install at the worktree, and
    every later ``grelmicro-sidecar`` of that venv ran the worktree's code."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        import tomllib

        project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
        extra = project["optional-dependencies"]["bench"]
        _log(f"installing the bench extra ({', '.join(extra)}) into this venv ...")
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", *extra], check=True)


def _impl_order(keys: list[str]) -> list[str]:
    return [k for k in ("sidecar", "clientgo", "grelmicro", "official") if k in keys]


def run(plan: Plan, only: set[str] | None) -> dict[str, Any]:
    from tests.cluster import ControlPlane

    from . import peers, scenarios
    from .harness import IMPLS, AuditLog, Credentials, cleanup_on_exit, loadavg

    def wanted(name: str) -> bool:
        return only is None or name in only

    started = time.time()
    measured = source()  # before the run: what is measured, whatever happens to the tree meanwhile
    _log("preparing the peers (cached after the first run) ...")
    peers.ensure_clientgo()
    py = peers.ensure_python_peers()
    versions: dict[str, Any] = {"client-go": peers.clientgo_version()}
    pv = peers.python_versions(py)
    versions |= {
        "grelmicro": pv["grelmicro"],
        "kubernetes_python": pv["kubernetes"],
        "lightkube": pv["lightkube"],
    }
    import compileall

    import sidecar
    from sidecar import __version__ as sidecar_version

    versions["sidecar"] = sidecar_version
    # As the image's build does (Dockerfile: compileall): the candidates start from bytecode,
    # as the peers' pip-installed packages do, not by compiling the tree at every start.
    compileall.compile_dir(str(Path(sidecar.__file__).parent), quiet=1)

    workdir = Path(tempfile.mkdtemp(prefix="grelmicro-bench-"))
    plane = ControlPlane(workdir / "controlplane")
    _log(f"starting the control plane in {workdir} ...")
    plane.start()
    res: dict[str, Any] = {"notes": []}
    try:
        out = plane.kubectl("version", "-o", "json", check=False).stdout
        with_server = json.loads(out or "{}").get("serverVersion", {})
        versions["kubernetes_server"] = with_server.get("gitVersion", "?")
        for impl in IMPLS.values():
            plane.kubectl("create", "namespace", impl.namespace)
        creds = Credentials(plane, workdir / "creds")
        audit = AuditLog(plane.audit_log)
        keys = list(IMPLS)
        with cleanup_on_exit():
            if wanted("handover"):
                res["graceful_handover"] = graceful(plan, keys, workdir, creds)
            if wanted("transfer"):
                from . import transfer

                _log(f"planned transfer, acknowledged drain, sidecar: {plan.handover_count} ...")
                res["transfer"] = transfer.measure(workdir, creds, plan.handover_count)
            if wanted("shards"):
                from . import shards

                res["shards"] = shards.measure(workdir, creds, audit)
            if wanted("failover"):
                res["crash_failover"] = crash(plan, keys, workdir, creds)
            if wanted("steady"):
                res["steady_state"] = {}
                for n in (3, 10):
                    _log(
                        f"steady state, N = {n}, {plan.steady_seconds:g}s, all implementations at once ..."
                    )
                    res["steady_state"][str(n)] = scenarios.steady_state(
                        [IMPLS[k] for k in keys],
                        workdir,
                        creds,
                        audit,
                        n=n,
                        duration=plan.steady_seconds,
                        warmup=plan.steady_warmup,
                        floor=n == 3,
                    )
            if wanted("startup"):
                res["startup"] = {}
                for k in keys:
                    _log(f"start-up, {k} ...")
                    res["startup"][k] = scenarios.startup(
                        IMPLS[k], workdir, creds, plan.startup_runs, free=False
                    )
                _log("start-up on a released Lease, sidecar ...")
                res["startup_free"] = {
                    "sidecar": scenarios.startup(IMPLS["sidecar"], workdir, creds, 2, free=True)
                }
            if wanted("first-leader"):
                from .first import first_leader

                _log(f"first leader: {FIRST_N} fresh candidates at once, brand-new elections ...")
                res["first_leader"] = {
                    k: first_leader(IMPLS[k], workdir, creds, n=FIRST_N, runs=plan.first_runs)
                    for k in plan.scale_impls
                }
            if wanted("scale") or wanted("one-election") or wanted("many-elections"):
                res["scale"] = {"one_election": {}, "many_elections": {}}
                for k in plan.scale_impls if wanted("scale") or wanted("one-election") else ():
                    _log(f"scale: {plan.big_n} {k} candidates in one election ...")
                    res["scale"]["one_election"][k] = scenarios.one_big_election(
                        IMPLS[k], workdir, creds, audit,
                        n=plan.big_n, window=plan.big_window, count=plan.big_handovers,
                    )  # fmt: skip
                for k in plan.scale_impls if wanted("scale") or wanted("many-elections") else ():
                    _log(f"scale: {plan.many_elections} {k} elections × 2 candidates ...")
                    res["scale"]["many_elections"][k] = scenarios.many_elections(
                        IMPLS[k], workdir, creds, audit,
                        elections=plan.many_elections, per_election=2, window=plan.many_window,
                    )  # fmt: skip
            if (plan.crowd_n and wanted("one-election-500")) or "one-election-500" in (only or ()):
                from . import crowd

                res["crowd"] = crowd.measure(
                    plane, workdir, creds, audit, n=plan.crowd_n or crowd.N
                )
            if wanted("thousand-elections") and (plan.thousand or only):
                from . import thousand

                res["thousand"] = thousand.measure(
                    plane, workdir, creds, audit, elections=plan.thousand or thousand.ELECTIONS
                )
            if wanted("injector"):
                res["injector"] = injector(plane.kubeconfig)
            if plan.sweep_pods and wanted("sweep"):
                from . import sweep

                _log(f"shutdown sweeps: {plan.sweep_pods} pods stop among {sweep.LEASES} managed "
                     f"Leases, {sweep.BASELINE} then this tree ...")  # fmt: skip
                res["sweep"] = sweep.before_after(plane, workdir, plan.sweep_pods, sweep.LEASES)
    finally:
        plane.stop()
        if os.environ.get("BENCH_KEEP_WORKDIR"):  # the audit log and every candidate's log
            _log(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    if plan.pod_rounds and wanted("pods"):
        res["pods"] = real_pods(plan.pod_rounds)
    finished = time.time()
    res["meta"] = {
        "mode": plan.mode,
        "plan": plan.__dict__,
        "started": _iso(started),
        "finished": _iso(finished),
        "duration_minutes": round((finished - started) / 60, 1),
        "machine": machine(),
        "source": measured,
        "loadavg_start": LOAD_START,
        "loadavg_end": loadavg(),
        "versions": versions,
    }
    derive(res)
    return res


LOAD_START: list[float] = []


def real_pods(rounds: int) -> dict[str, Any]:
    """bench.pods in this run: the rollouts and pod deletions on the real node, every way side by side."""
    from tests.cluster.host import unsupported_reason

    from . import pods

    why = unsupported_reason()
    if why:
        _log(f"real pods skipped: {why}")
        return {"gap": why}
    _log(f"real pods: {rounds} leader deletions and {rounds} rollouts per way of electing ...")
    return pods.run(rounds, rounds)


def graceful(plan: Plan, keys: list[str], workdir: Path, creds: Any) -> dict[str, Any]:
    """The official client's handovers (a lease duration each) run beside the others' sequence."""
    from . import scenarios
    from .harness import IMPLS

    results: dict[str, list[Any]] = {}

    def one(k: str, count: int) -> None:
        _log(f"graceful handover, {k}: {plan.handover_rounds} round(s) × {count} ...")
        results[k] = scenarios.handovers(
            IMPLS[k], workdir, creds, sig=signal.SIGTERM, n=3, count=count,
            rounds=plan.handover_rounds, settle=plan.settle, jitter=2.0,
        )  # fmt: skip

    slow = threading.Thread(target=one, args=("official", plan.official_count))
    if "official" in keys:
        slow.start()
    for k in keys:
        if k != "official":
            one(k, plan.handover_count)
    if "official" in keys:
        slow.join()
    return {
        k: {"handovers": scenarios.handovers_as_dicts(results[k])}
        for k in _impl_order(list(results))
    }


def crash(plan: Plan, keys: list[str], workdir: Path, creds: Any) -> dict[str, Any]:
    """All implementations at once: each run waits out a 15 s lease."""
    from . import scenarios
    from .harness import IMPLS

    results: dict[str, list[Any]] = {}

    def one(k: str) -> None:
        results[k] = scenarios.handovers(
            IMPLS[k], workdir, creds, sig=signal.SIGKILL, n=3, count=plan.crash_count,
            rounds=1, settle=plan.settle + 2, jitter=3.0, timeout=40,
        )  # fmt: skip

    _log(f"crash failover, {plan.crash_count} runs each, all implementations at once ...")
    threads = [threading.Thread(target=one, args=(k,)) for k in keys]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {
        k: {"handovers": scenarios.handovers_as_dicts(results[k])}
        for k in _impl_order(list(results))
    }


def injector(kubeconfig: Path) -> dict[str, Any]:
    try:
        from . import injector_latency  # type: ignore[attr-defined]
    except ImportError:
        return {
            "gap": "bench/injector_latency.py (another engineer's, with the injector) was not in "
            "the tree when this run was made, so admission latency was not measured."
        }
    _log("injector admission latency, 50 concurrent pod creations ...")
    try:
        out: dict[str, Any] = injector_latency.measure(kubeconfig, concurrency=50)
    except Exception as err:  # report, never hide
        return {"gap": f"bench/injector_latency.measure failed: {err!r}"}
    return out


def derive(res: dict[str, Any]) -> None:
    """Summaries, ratios and the target verdicts, from the raw measurements."""
    from .figures import summary

    for block_name in ("graceful_handover", "crash_failover"):
        block = res.get(block_name)
        if not block:
            continue
        impls = [b for b in block.values() if isinstance(b, dict) and "handovers" in b]
        for b in impls:
            lat = [h["latency"] for h in b["handovers"]]
            b["latencies"] = lat
            b["summary"] = summary(lat)
            rounds = sorted({h["round"] for h in b["handovers"]})
            b["per_round_p50"] = [
                summary([h["latency"] for h in b["handovers"] if h["round"] == r])["p50"]
                for r in rounds
            ]
        downs = [h["stepdown"] for b in impls for h in b["handovers"] if h["stepdown"] is not None]
        block_max = max(downs) if downs else None
        if block_name == "graceful_handover":
            block["max_stepdown"] = block_max
    gh = res.get("graceful_handover") or {}
    if "sidecar" in gh:
        base = gh["sidecar"]["summary"].get("p50")
        for b in gh.values():
            if isinstance(b, dict) and "summary" in b and base:
                b["ratio_p50_to_sidecar"] = (b["summary"].get("p50") or 0) / base
    if res.get("startup") or res.get("steady_state"):
        fp: dict[str, Any] = {}
        ss3 = (res.get("steady_state") or {}).get("3", {}).get("impls", {})
        for k in ("sidecar", "clientgo", "grelmicro", "official"):
            st = (res.get("startup") or {}).get(k, [])
            b = ss3.get(k, {})
            fp[k] = {
                "startup_seconds": [x["seconds"] for x in st],
                "startup_summary": summary([x["seconds"] for x in st]),
                "rss_mb_leader": b.get("rss_mb_leader", 0.0),
                "rss_mb_max": b.get("rss_mb_max", 0.0),
                "cpu_s_per_min_leader": b.get("cpu_s_per_min_leader"),
                "cpu_s_per_min_follower": b.get("cpu_s_per_min_follower_mean"),
            }
        res["footprint"] = fp
        res["floor_rss_mb"] = (res.get("steady_state") or {}).get("3", {}).get("floor_rss_mb")
    res["targets"] = targets(res)


def targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    from .figures import ms, summary

    out: list[dict[str, Any]] = []

    def add(id_: str, metric: str, target: str, measured: str, met: bool | None) -> None:
        out.append(
            {"id": id_, "metric": metric, "target": target, "measured": measured, "met": met}
        )

    gh = (res.get("graceful_handover") or {}).get("sidecar")
    if gh and gh["summary"].get("n"):
        s = gh["summary"]
        add("1", "graceful handover p50", "≤ 100 ms", ms(s["p50"]), s["p50"] <= 0.1)
        add(
            "1",
            "graceful handover max",
            "≤ 300 ms",
            f"{ms(s['max'])} (n = {s['n']})",
            s["max"] <= 0.3,
        )
    cf = (res.get("crash_failover") or {}).get("sidecar")
    if cf and cf["summary"].get("n"):
        s = cf["summary"]
        add(
            "2",
            "crash failover max",
            "≤ 15.25 s (lease + 250 ms)",
            f"{ms(s['max'])} (n = {s['n']})",
            s["max"] <= 15.25,
        )
    ss = res.get("steady_state") or {}
    for n_key, block in sorted(ss.items(), key=lambda kv: int(kv[0])):
        b = block["impls"].get("sidecar")
        if not b:
            continue
        minutes = block["window_seconds"] / 60
        followers = [c for c in b["candidates"] if c["role"] == "follower"]
        extra = {
            v: k for c in followers for v, k in c["per_minute"].items() if v != "watch" and k > 0
        }
        watches = max((c["per_minute"].get("watch", 0.0) * minutes for c in followers), default=0.0)
        ok = not extra and watches <= 1.0 + 1e-9
        add(
            "3",
            f"followers' requests, N = {n_key}",
            "none besides one long-lived watch",
            ("only the watch" if not extra else f"also {_fmt_verbs(extra)} /min")
            + f"; most watches (re)opened by one follower in {block['window_seconds']:.0f} s: {watches:.0f}",
            ok,
        )
        writes = sum(
            k for v, k in b["leader_per_minute"].items() if v in ("update", "patch", "create")
        )
        add(
            "3",
            f"leader's writes, N = {n_key}",
            "≤ 1 per 5 s (12/min)",
            f"{writes:.1f}/min; leader total {b['leader_requests_per_minute']:.1f}/min ({_fmt_verbs(b['leader_per_minute'])})",
            writes * minutes <= block["window_seconds"] / 5 + 1,
        )
    b3 = (ss.get("3") or {}).get("impls", {})
    if "sidecar" in b3 and "clientgo" in b3:
        sc = b3["sidecar"]["total_requests_per_minute"]
        cg = b3["clientgo"]["total_requests_per_minute"]
        ratio = cg / sc if sc else float("inf")
        add(
            "3",
            "requests vs client-go, N = 3",
            "≥ 5× fewer",
            f"{ratio:.1f}× fewer ({sc:.1f} vs {cg:.1f} /min)",
            ratio >= 5,
        )
    big = ((res.get("scale") or {}).get("one_election") or {}).get("sidecar") or {}
    if big.get("handover_lease_writes"):
        w, c = big["handover_lease_writes"], big["handover_conflicts"]
        add(
            "15",
            f"Lease writes per handover, {big['n']} candidates",
            "≤ 2, no 409",
            f"max {max(w)}, 409s {sum(c)} (n = {len(w)})",
            max(w) <= 2 and sum(c) == 0,
        )
        peer = ((res.get("scale") or {}).get("one_election") or {}).get("clientgo") or {}
        if big.get("handover_seconds") and peer.get("handover_seconds"):
            mine = summary(big["handover_seconds"])["p50"]
            theirs = summary(peer["handover_seconds"])["p50"]
            add(
                "15",
                f"handover p50, {big['n']} candidates",
                "≤ client-go's",
                f"{ms(mine)} vs {ms(theirs)}",
                mine <= theirs,
            )
        mine_cpu, theirs_cpu = (b.get("handover_followers_cpu_seconds") for b in (big, peer))
        if mine_cpu and theirs_cpu:
            m, t = statistics.median(mine_cpu), statistics.median(theirs_cpu)
            add(
                "38",
                f"followers' CPU per handover, {big['n']} candidates",
                "≤ 2× client-go's",
                f"{m:.3f} s vs {t:.3f} s p50 ({m / t:.1f}×)" if t else f"{m:.3f} s vs 0 s",
                bool(t) and m <= 2 * t,
            )
    fp = (res.get("footprint") or {}).get("sidecar")
    if fp:
        if fp["rss_mb_max"]:
            add(
                "4",
                "RSS at steady state",
                "≤ 30 MB",
                f"{fp['rss_mb_max']:.1f} MB (largest candidate)",
                fp["rss_mb_max"] <= 30,
            )
        s = fp["startup_summary"]
        if s.get("n"):
            add(
                "4",
                "process start → leading a new election",
                "≤ 0.5 s",
                f"p50 {ms(s['p50'])}, max {ms(s['max'])} (n = {s['n']})",
                s["max"] <= 0.5,
            )
    peer = (res.get("footprint") or {}).get("clientgo")
    if fp and peer and fp["rss_mb_leader"] and peer["rss_mb_leader"]:
        floor = res.get("floor_rss_mb")
        add(
            "15",
            "leader RSS at steady state",
            "≤ client-go's",
            f"{fp['rss_mb_leader']:.1f} vs {peer['rss_mb_leader']:.1f} MB"
            + (f" (CPython floor {floor:.1f} MB)" if floor else ""),
            fp["rss_mb_leader"] <= peer["rss_mb_leader"],
        )
    from .targets import against_clientgo, shards
    from .transfer import targets as transfer_targets

    out += against_clientgo(res)
    out += transfer_targets(res)
    out += shards(res)
    loads = (res.get("pods") or {}).get("workloads") or {}
    ours = loads.get("sidecar") or {}
    for key, who in (("clientgo", "client-go"), ("grelmicro", "grelmicro")):
        theirs = loads.get(key) or {}
        for measure, what in (
            ("rollout_restart_leaderless_s", "rollout restart"),
            ("delete_pod_leaderless_s", "leader pod deletion"),
        ):
            a, b = ours.get(measure) or {}, theirs.get(measure) or {}
            if a.get("n") and b.get("n"):
                add(
                    "15",
                    f"leaderless per {what}, real pods, p50",
                    f"≤ {who}'s",
                    f"{ms(a['p50'])} vs {ms(b['p50'])} (n = {a['n']}, {b['n']})",
                    a["p50"] <= b["p50"],
                )
    sweep = res.get("sweep") or {}
    if sweep.get("after"):
        now, was_run = sweep["after"], sweep.get("before")
        lists = now["start"]["sweep_lists"] + now["stop"]["sweep_lists"]
        was = (
            f" (before: {was_run['start']['sweep_lists'] + was_run['stop']['sweep_lists']})"
            if was_run
            else ""
        )
        add(
            "15",
            f"sweep LISTs, {now['pods']} pods start and stop among {now['leases']} Leases",
            "linear in stopping pods, not pods × elections",
            f"{lists}{was}; DELETEs {now['stop']['deletes']:,}, abandoned left {now['abandoned_left']}",
            lists <= 2 and now["abandoned_left"] == 0,
        )
    inj = res.get("injector")
    if inj is not None:
        if inj.get("gap"):
            add(
                "6",
                "injector admission p99 at 50 concurrent",
                "≤ 20 ms",
                "not measured (see §6)",
                None,
            )
        elif inj.get("p99_ms") is not None:
            add(
                "6",
                "injector admission p99 at 50 concurrent",
                "≤ 20 ms",
                f"{float(inj['p99_ms']):.1f} ms",
                float(inj["p99_ms"]) <= 20,
            )
    return out


def _fmt_verbs(per: dict[str, float]) -> str:
    return ", ".join(f"{v} {k:g}" for v, k in sorted(per.items())) or "none"


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


#: What describes a run rather than measures it: never taken from a partial one.
RUN_KEYS = ("meta", "notes", "targets", "figures")
LATER = ": from a later run "


def merged(earlier: dict[str, Any], partial: dict[str, Any]) -> dict[str, Any]:
    """``earlier`` with the sections ``partial`` measured put in its place, and a note saying
    which, from what commit and when: rows compared side by side stay within one run."""
    sections = sorted(k for k in partial if k not in RUN_KEYS)
    meta = partial["meta"]
    source = meta.get("source") or {}
    note = (
        f"{', '.join(sections)}{LATER}({meta['mode']}, --only), on "
        f"{source.get('commit', '?')[:7]}{' (dirty)' if source.get('dirty') else ''}, "
        f"{meta['started']} to {meta['finished']}, load {meta['loadavg_start']} to "
        f"{meta['loadavg_end']}; the peers each compares with ran in that same run"
    )
    out = {k: v for k, v in earlier.items() if k not in sections}
    out.update({k: partial[k] for k in sections})
    kept = [n for n in (_unless(n, sections) for n in earlier.get("notes") or []) if n]
    out["notes"] = [*kept, *(partial.get("notes") or []), note]
    return out


def _unless(note: str, sections: list[str]) -> str | None:
    """An earlier run's note without the sections measured again since (None when none is
    left): each section's figures come from one run, and its note names that one."""
    named, sep, rest = note.partition(LATER)
    if not sep:
        return note
    left = [s for s in named.split(", ") if s not in sections]
    return f"{', '.join(left)}{LATER}{rest}" if left else None


def write_outputs(res: dict[str, Any]) -> None:
    from . import report
    from .standalone import json_default

    RESULTS.mkdir(parents=True, exist_ok=True)
    res["figures"] = report.figures(res, RESULTS)
    (RESULTS / "latest.json").write_text(json.dumps(res, indent=1, default=json_default) + "\n")
    text = report.markdown(res)
    text = re.sub(r"\]\((\w+\.png)\)", r"](results/\1)", text)
    (HERE / "RESULTS.md").write_text(text)
    _log(f"wrote {RESULTS / 'latest.json'}, {HERE / 'RESULTS.md'} and {', '.join(res['figures'])}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer runs, shorter windows (~5 min)")
    parser.add_argument(
        "--only",
        help="comma-separated subset: handover, transfer, shards, failover, steady, startup, "
        "first-leader, scale (or one of its two: one-election, many-elections), one-election-500, "
        "thousand-elections, injector, sweep, pods",
    )
    parser.add_argument(
        "--report-only", action="store_true", help="redraw from results/latest.json"
    )
    parser.add_argument(
        "--merge",
        action="store_true",
        help="with --only: replace just the sections measured now in results/latest.json, "
        "keeping the rest, with a note naming this run",
    )
    args = parser.parse_args(argv)
    ensure_matplotlib()
    from . import harness, peers, report, scenarios  # noqa: F401  (all loaded before a long run)

    if args.report_only:
        res = json.loads((RESULTS / "latest.json").read_text())
        derive(res)
        write_outputs(res)
        return 0
    from .harness import loadavg

    LOAD_START[:] = loadavg()
    only = set(args.only.split(",")) if args.only else None
    if args.merge and not only:
        parser.error("--merge needs --only: a whole run replaces every section anyway")
    res = run(QUICK if args.quick else FULL, only)
    if args.merge:
        res = merged(json.loads((RESULTS / "latest.json").read_text()), res)
        derive(res)
    write_outputs(res)
    print((HERE / "RESULTS.md").read_text())
    return 0


if __name__ == "__main__":
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    sys.exit(main())
