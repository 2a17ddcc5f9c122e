"""One crowded election's accounting from the audit log (bench.crowdstats): pure, no cluster."""

from __future__ import annotations

from bench.__main__ import targets
from bench.crowdstats import (
    Phase,
    Term,
    Watchers,
    by_object,
    handover_stats,
    markdown,
    max_renew_gap,
    on_lease,
    phase_stats,
    stepdown_cause,
    unsignalled,
)
from bench.harness import AuditRequest
from bench.report import LABELS

NS = "/apis/coordination.k8s.io/v1/namespaces/bench-sidecar/leases"
HOLDER, OTHER, THIRD = "bench:sidecar:crowd-0", "bench:sidecar:crowd-1", "bench:sidecar:crowd-2"


#: A watch still open when the log was read: its entry has no completion.
OPEN = -1.0


def _req(
    user: str, verb: str, at: float, code: int | None = 200, done: float | None = None, **kw: str
) -> AuditRequest:
    name = kw.get("name", "leader-crowd")
    uri = kw.get("uri", f"{NS}/{name}")
    end = None if done == OPEN else at + 0.01 if done is None else done
    return AuditRequest(user, "", verb, uri, at, end, code, name)


def test_a_create_and_a_watch_by_field_selector_are_on_the_lease_by_object_name() -> None:
    reqs = [
        _req(HOLDER, "create", 1.0, 201, uri=NS),  # the collection's URI: named by objectRef
        _req(OTHER, "watch", 1.0, uri=f"{NS}?watch=1&fieldSelector=metadata.name%3Dleader-crowd"),
        _req(OTHER, "create", 1.0, 409, uri=NS, name="grelmicro-sidecar"),
        _req(OTHER, "create", 1.0, 201, uri="/api/v1/namespaces/bench-sidecar/events", name="x"),
    ]
    assert [r.verb for r in on_lease(reqs, "leader-crowd")] == ["create", "watch"]
    assert by_object(reqs, "leader-crowd") == {
        "create Lease 201": 1,
        "watch Lease 200": 1,
        "create coordination 409": 1,
        "create Event 201": 1,
    }


def test_watchers_open_at_an_instant() -> None:
    w = Watchers(
        [
            _req(OTHER, "watch", 1.0, done=5.0),
            _req(THIRD, "watch", 2.0, done=OPEN),  # still open when the log was read
            _req(HOLDER, "get", 0.0),
        ]
    )
    assert [w.at(t) for t in (0.5, 1.5, 3.0, 6.0)] == [0, 1, 2, 1]


def test_phase_counts_modifications_times_watchers_and_only_the_holders_409s() -> None:
    reqs = [
        _req(OTHER, "watch", 0.0, done=OPEN),
        _req(THIRD, "watch", 0.0, done=OPEN),
        _req(HOLDER, "watch", 0.0, done=OPEN),
        _req(HOLDER, "update", 10.0),  # a renew: 3 watchers
        _req(OTHER, "patch", 10.5),  # a join
        _req(THIRD, "patch", 10.5, 409),  # a join over an old version: no event
        _req(HOLDER, "update", 15.0, 409),  # the holder's renew met the join
        _req(HOLDER, "get", 15.1),  # its quorum read
        _req(HOLDER, "update", 15.2),
        _req(THIRD, "update", 16.0, 409),  # a follower's lost claim is not the holder's
        _req(HOLDER, "update", 99.0),  # outside the phase
    ]
    terms = [Term(HOLDER, 5.0, 50.0)]
    p = phase_stats(reqs, Phase("mass start", 8.0, 20.0), terms, n=3)
    assert p["modifications"] == 3 and p["watch_events"] == 9
    assert p["watch_events_per_candidate"] == 3.0
    assert p["writes"] == 4 and p["writes_409"] == 2
    assert p["patches"] == 2 and p["patches_ok"] == 1 and p["patches_409"] == 1
    assert p["holder_409s"] == 1
    assert p["gets"] == 1
    assert p["requests"]["update 409"] == 2


def test_renew_gap_runs_from_the_terms_start_between_successful_writes_to_its_end() -> None:
    reqs = [
        _req(HOLDER, "update", 5.0),
        _req(HOLDER, "update", 10.0, 409),  # refused: not a renew
        _req(HOLDER, "update", 13.5),  # 8.5 s after the last one: a near miss
        _req(OTHER, "update", 14.0),  # another's write
    ]
    terms = [Term(HOLDER, 1.0, 16.0), Term(OTHER, 16.0, 20.0)]
    assert max_renew_gap(reqs, terms, 0.0, 100.0) == 8.5
    assert max_renew_gap(reqs, terms, 100.0, 200.0) is None, "no term overlaps"
    assert max_renew_gap(reqs, [Term(OTHER, 16.0, 20.0)], 0.0, 100.0) == 4.0


def test_handover_counts_the_release_and_claims_not_the_successors_renews() -> None:
    reqs = [
        _req(HOLDER, "update", 100.0),  # the release
        _req(THIRD, "update", 100.02, 409),  # a lost claim
        _req(OTHER, "update", 100.03),  # the claim
        _req(OTHER, "update", 100.3),  # a renew: not counted
        _req(THIRD, "patch", 100.1),
        _req(OTHER, "update", 101.0),  # after the window
    ]
    assert handover_stats(reqs, 100.0, 100.05, OTHER) == {
        "writes": 3,
        "conflicts": 1,
        "patches": 1,
    }


def test_a_stepdown_is_put_down_to_409s_a_slow_api_server_or_both() -> None:
    streak = [_req(HOLDER, "update", 20.0 + i / 2, 409) for i in range(4)]
    streak += [_req(HOLDER, "list", 20.2 + i / 2) for i in range(4)]  # its quorum reads
    streak.append(_req(OTHER, "update", 22.0, 409))  # another candidate's: not the holder's
    streak.append(_req(HOLDER, "update", 5.0))  # before the renew deadline's window
    streak.append(_req(HOLDER, "list", 26.1, 500))  # after it stepped down
    assert stepdown_cause(streak, HOLDER, 26.0) == {
        "requests": {"list ok": 4, "update 409": 4},
        "cause": "conflicts",
    }
    late = [_req(HOLDER, "update", 20.0, done=21.5)]  # applied, answered after 1.5 s
    assert stepdown_cause(late, HOLDER, 26.0)["cause"] == "slow API server"
    timeouts = [_req(HOLDER, "update", 20.0, 504), _req(HOLDER, "list", 24.0, None)]
    assert stepdown_cause(timeouts, HOLDER, 26.0)["requests"] == {
        "list no answer": 1,
        "update 5xx": 1,
    }
    assert stepdown_cause(timeouts + streak, HOLDER, 26.0)["cause"] == "both"
    assert stepdown_cause([], HOLDER, 26.0)["cause"] == "none seen"


def test_a_step_down_published_before_the_sigterm_is_the_holders_own() -> None:
    assert unsignalled(100.0, None)
    assert unsignalled(100.0, 100.2), "it stepped down 200 ms before the signal"
    assert not unsignalled(100.2, 100.0), "the signal's step-down"
    assert not unsignalled(100.0, 100.0005), "within the stamp's slack"


def _impl(downs: int, holder_409s: int, handovers: list[float]) -> dict[str, object]:
    phase = {
        "name": "mass start", "seconds": 60.0, "writes": 1, "writes_409": 0, "patches": 499,
        "patches_409": 900, "gets": 0, "modifications": 500, "watch_events_per_candidate": 400.0,
        "holder_409s": holder_409s, "max_renew_gap": 7.25, "cpu": {"kube-apiserver": 30.0},
    }  # fmt: skip
    return {
        "n": 500,
        "loadavg": [1.0, 2.0, 3.0],
        "phases": [phase],
        "unsignalled_stepdowns": [{"cause": "conflicts"}] * downs,
        "logged_stepdowns": downs,
        "unexpected_exits": [],
        "max_renew_gap": 7.25,
        "handover_seconds": handovers,
        "after_a_stepdown_seconds": [9.5] * downs,
        "handovers": [{"writes": 2, "conflicts": 0, "patches": 3}],
        "mass_start": {
            "first_leader": 1.5,
            "settled": 90.0,
            "unsettled": 0,
            "cpu": {"kube-apiserver": 30.0, "etcd": 5.0},
        },
        "steady": {"apiserver_cpu_per_min": 3.0, "requests_per_second": 0.2},
        "rss_total_mb": 13000.0,
    }


def test_targets_and_section_from_both_implementations() -> None:
    res = {"crowd": {"sidecar": _impl(0, 3, [0.05, 0.07]), "clientgo": _impl(1, 0, [0.5, 0.9])}}
    rows = {r["metric"]: r for r in targets(res)}
    assert rows["holder stepped down unsignalled, 500 candidates, one election"]["met"] is True
    refused = rows["holder's renews refused (409), 500 candidates"]
    assert refused["met"] is False and refused["measured"] == "3"
    p50 = rows["handover p50, 500 candidates"]
    assert p50["met"] is True and p50["measured"] == "60 ms vs 700 ms"
    text = markdown(res["crowd"], LABELS)
    assert "| holder stepped down unsignalled | 0 (logs: 0) | 1 (logs: 1) |" in text
    assert "| holder's 409s (all phases) | 3 | 0 |" in text
    assert (
        "| … of which just before its SIGTERM (no graceful handover) | 0 | 1 (successor led after 9.50 s) |"
        in text
    )
    assert "| … their cause (the holder's requests in the 10 s before) | – | conflicts: 1 |" in text
    assert (
        "| client-go | mass start | 60 | 1 (0) | 499 (900) | 0 | 500 | 400 | 0 | 7.25 s | 30.0 |"
        in text
    )


def test_a_skipped_implementation_is_a_gap_not_a_row() -> None:
    res = {"crowd": {"sidecar": {"gap": "2048 MB available, 17048 MB needed"}}}
    assert targets(res) == []
    assert "**Gap:**" in markdown(res["crowd"], LABELS)
