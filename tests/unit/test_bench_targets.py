"""The bench's targets against client-go and the mass rollout's profile (bench.targets, bench.burst)."""

from __future__ import annotations

from bench import burst
from bench.__main__ import targets
from bench.first import markdown as first_markdown
from bench.harness import AuditRequest
from bench.report import LABELS
from bench.targets import against_clientgo


def _many(latencies: list[float]) -> dict[str, object]:
    return {"elections": 200, "candidates_per_election": 2, "handover_seconds": latencies}


def test_mass_rollout_p50_and_p99_are_judged_against_clientgo_from_the_same_run() -> None:
    res = {
        "scale": {
            "many_elections": {
                "sidecar": _many([1.0, 1.2, 1.4, 5.0]),
                "clientgo": _many([1.5, 1.8, 2.0, 4.0]),
            }
        }
    }
    rows = {r["metric"]: r for r in against_clientgo(res)}
    p50 = rows["mass rollout, 200 elections × 2, handover p50"]
    p99 = rows["mass rollout, 200 elections × 2, handover p99"]
    assert p50["met"] is True and p50["target"] == "≤ client-go's"
    assert p50["measured"].startswith("1,300 ms vs 1,900 ms (0.68×")
    assert p99["met"] is False and "5,000 ms vs 4,000 ms (1.25×" in p99["measured"]


def test_first_leader_rows_from_processes_and_real_pods() -> None:
    res = {
        "first_leader": {"sidecar": [0.5, 0.6, 0.7], "clientgo": [0.4, 0.5, 0.6]},
        "pods": {
            "workloads": {
                "sidecar": {"create_to_leader_s": 1.1},
                "clientgo": {"create_to_leader_s": 1.19},
            }
        },
    }
    rows = {r["metric"]: r for r in against_clientgo(res)}
    procs = rows["3 fresh candidates → first leader, processes, p50"]
    assert procs["met"] is False and procs["measured"].startswith("600 ms vs 500 ms (1.20×")
    pods = rows["3 replicas created → first leader, real pods"]
    assert pods["met"] is True and pods["measured"].startswith("1,100 ms vs 1,190 ms")
    assert any(r["metric"] == pods["metric"] for r in targets(res)), "in the Targets table"


def test_no_row_without_both_contestants() -> None:
    res = {"scale": {"many_elections": {"sidecar": _many([1.0])}}, "first_leader": {"sidecar": [1]}}
    assert against_clientgo(res) == []


def _req(user: str, verb: str, uri: str, at: float, done: float, code: int = 200) -> AuditRequest:
    return AuditRequest(user, "", verb, uri, at, done, code)


LEASES = "/apis/coordination.k8s.io/v1/namespaces/bench-sidecar/leases"


def test_burst_profile_phases_and_requests_by_kind() -> None:
    rounds = [
        burst.Round("many-0", 100.0, "bench:sidecar:m0-0", "bench:sidecar:m0-1", 100.5, 100.01)
    ]
    reqs = [
        _req("bench:sidecar:m0-0", "patch", f"{LEASES}/grelmicro-sidecar", 100.05, 100.1),
        _req("bench:sidecar:m0-0", "get", f"{LEASES}/grelmicro-sidecar", 100.1, 100.15),
        _req("bench:sidecar:m0-0", "update", f"{LEASES}/leader-many-0", 100.2, 100.25),
        _req("bench:sidecar:m0-1", "update", f"{LEASES}/leader-many-0", 100.3, 100.35, 409),
        _req("bench:sidecar:m0-1", "update", f"{LEASES}/leader-many-0", 100.4, 100.45),
        _req(
            "bench:sidecar:m0-1",
            "create",
            "/api/v1/namespaces/bench-sidecar/events",
            100.6,
            100.7,
            201,
        ),
        _req("bench:sidecar:m0-1", "get", f"{LEASES}/leader-many-0", 99.0, 99.1),  # before
        _req("bench:sidecar:m0-1", "get", f"{LEASES}/leader-many-0", 102.0, 102.1),  # after
    ]
    prof = burst.profile(rounds, reqs, until=101.5)
    ph = {k: v.get("p50") for k, v in prof["phases"].items()}
    assert round(ph["stepdown"], 3) == 0.01
    assert round(ph["release_sent"], 3) == 0.2 and round(ph["release_done"], 3) == 0.25
    assert round(ph["claim_sent"], 3) == 0.4, "the 409 is not the claim"
    assert round(ph["claim_done"], 3) == 0.45 and round(ph["led"], 3) == 0.5
    assert prof["requests"] == {
        "patch roster 200": 1,
        "get roster 200": 1,
        "update Lease 200": 2,
        "update Lease 409": 1,
        "create Event 201": 1,
    }
    text = burst.markdown({"sidecar": {"burst": {**prof, "cpu": {"leaders": 1.5}}}}, LABELS)
    assert "| its release write received | 200 / 200 |" in text
    assert "| `update Lease 409` | 1 |" in text and "| CPU s, leaders | 1.5 |" in text


def test_first_leader_markdown_lists_every_run() -> None:
    text = first_markdown({"sidecar": [0.25, 0.5], "clientgo": [1.0, 2.0]}, LABELS)
    assert "| grelmicro-sidecar | 2 | 375 ms | 500 ms | 250 ms, 500 ms |" in text
    assert "| client-go | 2 | 1,500 ms | 2,000 ms |" in text
