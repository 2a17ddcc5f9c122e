"""Shards: 12 shards over 3 pods, a 4th pod, then one pod SIGTERMed (issue 40).

grelmicro-sidecar runs ``run --shards=12``, one process per pod. client-go,
the home-made alternative, runs 12 electors per pod in one process (the Go
peer's ``--candidates`` mode, each elector exactly as the single mode runs
one, over its own Lease ``leader-<election>-shard-<i>``); both at once, in
their own namespaces, at the default 15 s / 10 s / 2 s. Every pod has its own
client certificate, so the audit log names the pod behind each request.

An app per pod, as ``tests/sidecar/test_shards.py``'s ``Apps``: every 10 ms it
reads what it may act on (the sidecar: each shard entry with ``is_leader`` and
``valid_until`` ahead; client-go: each elector's state file saying it leads)
and acknowledges every drain the sidecar tells (``POST /drained``). Measured:

1. steady state: once every shard is owned (the sidecar's balanced), a warm-up,
   then a window: requests per shard per minute from the audit log;
2. 3 → 4 pods: a 4th pod starts; moves (shards whose owner changed), the gap of
   each in the apps' view, shards per pod after;
3. 4 → 3 pods: the pod owning the most shards is SIGTERMed; the same;
   2 and 3 ``ROUNDS`` times, each new pod with a fresh identity.

client-go does not rebalance: a new pod's electors only follow, so its moves
on 3 → 4 are what it does (none), and on 4 → 3 its moves are the
release-on-cancel failover of the stopped pod's shards.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any

from tests.chaos.moves import post
from tests.sidecar.proc import read_state

from . import peers
from .harness import IMPLS, AuditLog, Candidate, Credentials, parse_time, user_name, wait_until
from .shardstats import Tracker, balance, balanced, member_writes, moved, per_move, steady

SHARDS = 12
PODS = 3
ELECTION = "shards"
LEASE = f"leader-{ELECTION}"
IMPL_KEYS = ("sidecar", "clientgo")
#: After every shard is owned, before the window.
WARMUP = 20.0
WINDOW = 120.0
#: After a scale event, how long moves are watched for (client-go's included: it moves
#: nothing on 3 → 4, and its failover on 4 → 3 takes a poll, 2 s × up to 2.2).
EVENT = 20.0
#: Scale events: ROUNDS times 3 → 4 pods then 4 → 3, each pod a new one (fresh identity).
ROUNDS = 3
POLL = 0.01


def _log(msg: str) -> None:
    print(f"[bench] {time.strftime('%H:%M:%S')} {msg}", flush=True)


class ShardPod(Candidate):
    """One pod: the sidecar with ``--shards``, or the Go peer with one elector per shard."""

    def argv(self) -> list[str]:
        if self.impl.key == "sidecar":
            return [*super().argv(), f"--shards={SHARDS}"]
        spec = self.state_dir / "electors.tsv"
        lines = [
            "\t".join(
                [
                    self.impl.namespace,
                    f"{self.election}-shard-{i}",
                    self.identity,
                    str(self.kubeconfig),
                    str(self.state_dir / f"shard-{i}"),
                ]
            )
            for i in range(SHARDS)
        ]
        spec.write_text("\n".join(lines) + "\n")
        return [str(peers.ensure_clientgo()), f"--candidates={spec}"]

    def owned(self) -> set[int]:
        """What this pod's app acts on."""
        if self.impl.key == "clientgo":
            return {
                i
                for i in range(SHARDS)
                if (read_state(self.state_dir / f"shard-{i}") or {}).get("is_leader")
            }
        now = time.time()
        return {
            s["shard"]
            for s in (self.state() or {}).get("shards") or []
            if s["is_leader"] and s["valid_until"] and parse_time(s["valid_until"]) > now
        }

    def acknowledge(self) -> int:
        """Every drain the sidecar tells, acknowledged at once; how many were."""
        if self.impl.key != "sidecar" or not self.alive:
            return 0
        acked = 0
        for entry in (self.state() or {}).get("shards") or []:
            drain = entry.get("drain")
            if drain is not None:
                status, _ = post(
                    self.port, f"/drained?shard={entry['shard']}&token={drain['token']}"
                )
                acked += status == 200
        return acked


class Apps:
    """Every ``POLL`` seconds, for each implementation: what each pod's app acts on, into a
    ``Tracker``, and every drain acknowledged. Stopped pods stay read (their last files)."""

    def __init__(self, pods: dict[str, list[ShardPod]]) -> None:
        self.pods = pods
        self.trackers = {k: Tracker(SHARDS) for k in pods}
        self.acked = dict.fromkeys(pods, 0)
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="shard-apps")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for key, pods in self.pods.items():
                seen: dict[int, list[str]] = {}
                for pod in list(pods):
                    for shard in pod.owned():
                        seen.setdefault(shard, []).append(pod.identity)
                    self.acked[key] += pod.acknowledge()
                with self.lock:
                    self.trackers[key].observe(time.time(), seen)
            time.sleep(POLL)

    def owners(self, key: str) -> dict[int, str | None]:
        with self.lock:
            return dict(self.trackers[key].owner)

    def moves(self, key: str) -> int:
        with self.lock:
            return len(self.trackers[key].moves)

    def counts(self, key: str) -> dict[str, int]:
        return balance(self.owners(key), [p.identity for p in self.pods[key] if p.alive])

    def settled(self, key: str) -> bool:
        """Every shard owned by a live pod, and for the sidecar balanced over them."""
        counts = self.counts(key)
        if sum(counts.values()) != SHARDS:
            return False
        return key != "sidecar" or balanced(counts, SHARDS)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def _event(apps: Apps, key: str, before: dict[int, str | None], first_move: int) -> dict[str, Any]:
    after = apps.owners(key)
    with apps.lock:
        moves = [dict(m) for m in apps.trackers[key].moves[first_move:]]
    return {
        "moved": moved(before, after),
        "moved_count": len(moved(before, after)),
        "moves": moves,
        "balance": apps.counts(key),
    }


def _rss(pods: list[ShardPod]) -> list[float]:
    """VmRSS (MiB) of each pod process still running."""
    return [r for r in (p.rss_mb() for p in pods) if r is not None]


def measure(workdir: Path, creds: Credentials, audit: AuditLog) -> dict[str, Any]:
    pods: dict[str, list[ShardPod]] = {k: [] for k in IMPL_KEYS}

    def spawn(key: str) -> ShardPod:
        ident = f"shp-{len(pods[key])}"
        impl = IMPLS[key]
        pod = ShardPod(impl, ident, ELECTION, workdir, creds.kubeconfig(user_name(key, ident)))
        pod.start()
        pods[key].append(pod)
        return pod

    offset = audit.offset()
    for _ in range(PODS):
        for key in IMPL_KEYS:
            spawn(key)
    apps = Apps(pods)
    out: dict[str, Any] = {
        "shards": SHARDS,
        "pods": PODS,
        "timings": "15 s / 10 s / 2 s",
        "window_seconds": WINDOW,
        "event_seconds": EVENT,
        "impls": {k: {} for k in IMPL_KEYS},
    }
    res = out["impls"]
    try:
        _log(f"shards: {PODS} pods × {SHARDS} shards, sidecar and client-go at once ...")
        for key in IMPL_KEYS:
            wait_until(lambda k=key: apps.settled(k), 120, 0.05, f"{key}: every shard owned")
            res[key]["balance_start"] = apps.counts(key)
        time.sleep(WARMUP)
        owners = {k: apps.owners(k) for k in IMPL_KEYS}
        changes = {k: apps.moves(k) for k in IMPL_KEYS}
        start = time.time()
        time.sleep(WINDOW)
        end = time.time()
        for key in IMPL_KEYS:
            res[key]["rss_steady"] = _rss(pods[key])
            res[key]["steady_owner_changes"] = max(
                len(moved(owners[key], apps.owners(key))), apps.moves(key) - changes[key]
            )
        windows: dict[str, Any] = {"steady": (start, end)}

        windows["up"], windows["down"] = [], []
        for key in IMPL_KEYS:
            res[key]["scale_up"], res[key]["scale_down"] = [], []
        for n in range(ROUNDS):
            _log(f"shards: 3 → 4 pods ({n + 1}/{ROUNDS}) ...")
            before = {k: apps.owners(k) for k in IMPL_KEYS}
            first = {k: apps.moves(k) for k in IMPL_KEYS}
            up = time.time()
            for key in IMPL_KEYS:
                spawn(key)
            time.sleep(EVENT)
            for key in IMPL_KEYS:
                res[key]["scale_up"].append(
                    _event(apps, key, before[key], first[key]) | {"since": up}
                )
            windows["up"].append((up, time.time()))

            _log(f"shards: 4 → 3 pods ({n + 1}/{ROUNDS}), SIGTERM to the pod owning most ...")
            before = {k: apps.owners(k) for k in IMPL_KEYS}
            first = {k: apps.moves(k) for k in IMPL_KEYS}
            victims = {}
            for key in IMPL_KEYS:
                counts = apps.counts(key)  # the first started among those owning most
                victims[key] = next(
                    p for p in pods[key] if p.identity == max(counts, key=lambda i: counts[i])
                )
            down = time.time()
            for key in IMPL_KEYS:
                victims[key].signal(signal.SIGTERM)
            time.sleep(EVENT)
            for key in IMPL_KEYS:
                exit_code = victims[key].wait(15)
                ev = _event(apps, key, before[key], first[key])
                ev |= {
                    "since": down,
                    "stopped": victims[key].identity,
                    "stopped_had": sum(
                        1 for w in before[key].values() if w == victims[key].identity
                    ),
                    "exit_code": exit_code,
                }
                ev["balance"].pop(victims[key].identity, None)
                res[key]["scale_down"].append(ev)
            windows["down"].append((down, time.time()))
        for key in IMPL_KEYS:
            res[key]["rss_after"] = _rss(pods[key])
    finally:
        apps.stop()
        for key in IMPL_KEYS:
            for pod in pods[key]:
                if pod.alive:
                    pod.signal(signal.SIGTERM)
        for key in IMPL_KEYS:
            for pod in pods[key]:
                pod.wait(15)
                pod.kill()
    reqs = audit.requests(offset)
    for key in IMPL_KEYS:
        users = [user_name(key, p.identity) for p in pods[key]]
        b = res[key]
        b["steady"] = steady(reqs, users, *windows["steady"], SHARDS, LEASE)
        for name, spans in (("scale_up", windows["up"]), ("scale_down", windows["down"])):
            for ev, span in zip(b[name], spans, strict=False):
                ev["requests_per_move"] = per_move(reqs, users, ev["moves"], ev["since"], LEASE)
                ev["member_writes"] = member_writes(reqs, users, *span, LEASE)
        with apps.lock:
            b["twice"] = apps.trackers[key].twice
        b["acked"] = apps.acked[key]
    return out
