"""bench.shardstats and the shards rows of bench.targets: moves, gaps, requests per shard."""

from __future__ import annotations

from typing import Any

from bench.harness import AuditRequest
from bench.report import LABELS
from bench.shardstats import Tracker, balance, balanced, markdown, moved, per_move, steady
from bench.targets import shards

LEASES = "/apis/coordination.k8s.io/v1/namespaces/bench-sidecar/leases"
LEASE = "leader-shards"


def _req(user: str, verb: str, name: str, at: float, code: int = 200) -> AuditRequest:
    return AuditRequest(user, "", verb, f"{LEASES}/{name}", at, at + 0.01, code, name)


def test_tracker_times_each_move_and_counts_a_shard_acted_on_twice() -> None:
    t = Tracker(2)
    t.observe(0.0, {0: ["a"], 1: ["a"]})
    t.observe(1.0, {1: ["a"]})  # shard 0 told "not owner": unowned from 1.0
    t.observe(1.25, {0: ["b"], 1: ["a"]})  # ... until b acts on it
    t.observe(2.0, {0: ["b"], 1: ["c"]})  # shard 1 changed owner within one step
    t.observe(3.0, {0: ["b", "c"], 1: ["c"]})
    assert [(m["shard"], m["from"], m["to"], m["gap"]) for m in t.moves] == [
        (0, "a", "b", 0.25),
        (1, "a", "c", 0.0),
    ]
    assert t.moves[0]["at"] == 1.25 and t.twice == 1 and t.owned()


def test_balance_moved_and_balanced() -> None:
    before = {0: "a", 1: "a", 2: "b", 3: "c"}
    after = {0: "a", 1: "d", 2: "b", 3: "c"}
    assert moved(before, after) == [1]
    assert balance(after, ["a", "b", "c", "d", "e"]) == {"a": 1, "b": 1, "c": 1, "d": 1, "e": 0}
    assert balanced({"a": 4, "b": 4, "c": 4}, 12)
    assert not balanced({"a": 12, "b": 0, "c": 0}, 12)
    assert not balanced({"a": 4, "b": 4, "c": 3}, 12), "a shard unowned"


def test_steady_counts_per_shard_per_minute_by_class_and_lease_writes_by_kind() -> None:
    u = "bench:sidecar:shp-0"
    reqs = [
        *(_req(u, "update", f"{LEASE}-shard-{i % 2}", 10.0 + i) for i in range(24)),
        *(_req(u, "update", f"{LEASE}-member-shp-0", 10.0 + i) for i in range(6)),
        _req(u, "get", f"{LEASE}-shard-0", 20.0),
        _req(u, "watch", "", 30.0),  # (re)opened in the window
        AuditRequest(u, "", "watch", LEASES, 1.0, None, None, ""),  # open across it
        _req(u, "update", f"{LEASE}-shard-0", 70.0),  # after the window
        _req("bench:clientgo:shp-0", "get", f"{LEASE}-shard-0", 20.0),  # not this one's pods
    ]
    s = steady(reqs, [u], 10.0, 70.0, 2, LEASE)
    assert s["verbs"] == {"update": 30, "get": 1, "watch": 1}
    assert s["per_shard_per_minute"] == {"all": 16.0, "reads": 0.5, "writes": 15.0, "watches": 0.5}
    assert s["lease_writes_per_minute"] == {"shard": 24.0, "member": 6.0}
    assert s["watches_opened"] == 1 and s["watches_open_across"] == 1


def test_per_move_counts_requests_on_the_moved_shards_lease_until_a_second_after() -> None:
    a, b = "bench:sidecar:shp-0", "bench:sidecar:shp-3"
    reqs = [
        _req(a, "update", f"{LEASE}-shard-5", 100.1),  # the release naming b
        _req(b, "get", f"{LEASE}-shard-5", 100.15),
        _req(b, "update", f"{LEASE}-shard-5", 100.2, 409),
        _req(b, "update", f"{LEASE}-shard-5", 100.25),
        _req(a, "update", f"{LEASE}-shard-6", 100.2),  # another shard
        _req(a, "update", f"{LEASE}-shard-5", 102.0),  # a renewal, later
        _req(a, "update", f"{LEASE}-shard-5", 99.0),  # before the event
    ]
    moves = [{"shard": 5, "at": 100.3}]
    assert per_move(reqs, [a, b], moves, 100.0, LEASE) == [
        {"writes": 3, "reads": 1, "conflicts": 1}
    ]


def _impl(per_shard: dict[str, float], up_moved: int, down: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "balance_start": {"shp-0": 4, "shp-1": 4, "shp-2": 4},
        "steady": {
            "seconds": 120.0,
            "per_shard_per_minute": per_shard,
            "watches_open_across": 39,
            "lease_writes_per_minute": {"shard": 144.0, "member": 36.0},
        },
        "steady_owner_changes": 0,
        "scale_up": [
            {
                "moved_count": up_moved,
                "moves": [{"gap": 0.08}] * up_moved,
                "balance": {"shp-0": 3, "shp-1": 3, "shp-2": 3, "shp-3": 3},
                "requests_per_move": [{"writes": 2, "reads": 0, "conflicts": 0}] * up_moved,
                "member_writes": 2,
            }
        ]
        * 2,
        "scale_down": down,
        "twice": 0,
        "acked": 6,
        "rss_steady": [28.04, 28.41, 28.2],
        "rss_after": [27.9, 27.94],
    }


def _down(gaps: list[float], had: int) -> list[dict[str, Any]]:
    return [
        {
            "moved_count": len(gaps),
            "stopped_had": had,
            "moves": [{"gap": g} for g in gaps],
            "balance": {"shp-0": 4, "shp-1": 4, "shp-2": 4},
            "requests_per_move": [{"writes": 2, "reads": 1, "conflicts": 1}] * len(gaps),
            "member_writes": 1,
        }
    ]


def _res() -> dict[str, Any]:
    return {
        "shards": {
            "shards": 12,
            "pods": 3,
            "timings": "15 s / 10 s / 2 s",
            "window_seconds": 120.0,
            "impls": {
                "sidecar": _impl(
                    {"all": 15.5, "reads": 0.0, "writes": 15.0, "watches": 0.5},
                    3,
                    _down([0.05, 0.1, 0.2], 3),
                ),
                "clientgo": _impl(
                    {"all": 75.0, "reads": 45.0, "writes": 30.0, "watches": 0.0},
                    0,
                    _down([1.0, 2.0, 3.0, 4.0], 4),
                ),
            },
        }
    }


def test_shards_targets_compare_with_client_go_and_report_the_missed_write_bound() -> None:
    rows = {r["metric"]: r for r in shards(_res())}
    req = rows["12 shards: API requests per shard per minute, steady, 3 pods"]
    assert req["met"] is True and req["measured"] == "15.5 vs 75 (4.8× fewer)"
    assert rows["12 shards: Lease writes per minute, steady, all pods"]["met"] is True
    assert rows["12 shards: renew writes per pod"]["met"] is False, "one loop per shard"
    up = rows["12 shards: moves per scale 3 → 4 pods"]
    assert up["target"] == "= 3" and up["met"] is True and up["measured"] == "3, 3"
    assert rows["12 shards: moves per scale 4 → 3 pods (SIGTERM)"]["measured"] == "3 of 3"
    steps = rows["12 shards: shards per pod at each step"]
    assert steps["met"] is True and steps["measured"] == "3/3/3/3; 4/4/4 (4 steps)"
    gap = rows["12 shards: gap per move, 4 → 3 pods, max (apps' view)"]
    assert gap["met"] is True and gap["measured"] == "200 ms vs 4,000 ms (n = 3, 4)"
    assert shards({}) == []


def test_shards_markdown_has_a_column_per_implementation() -> None:
    text = markdown(_res()["shards"], LABELS)
    assert "| | grelmicro-sidecar | client-go |" in text
    assert "| steady: API requests per shard per minute, all | 15.5 | 75 |" in text
    assert "| 3 → 4 pods: moves per event | 3 (each) | 0 (each) |" in text
    gap = (
        "| 3 → 4 pods: gap per move p50 / max (apps' view) | 80 ms / 80 ms (n = 6) | – (no move) |"
    )
    assert gap in text
    stop = "| 4 → 3 pods (SIGTERM to the pod owning most): its shards / moves | 3/3 | 4/4 |"
    assert stop in text
    assert "| per move: 409s on its shard's Lease, in all | 3 | 4 |" in text
    assert (
        "| heartbeat Lease writes in each event's 20 s, 3 → 4 pods / 4 → 3 pods | 2 (each) / 1 |"
        in (text)
    )
    rss = "| RSS per pod process (MiB), after the steady window / after the 2 rounds | "
    assert f"{rss}28.0–28.4 / 27.9 | 28.0–28.4 / 27.9 |" in text
