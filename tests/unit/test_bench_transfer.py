"""bench.transfer's rows: the leaderless times set against client-go's graceful release's."""

from __future__ import annotations

from bench.transfer import targets


def test_rows_compare_leaderless_p50_and_max_with_client_gos_graceful_release() -> None:
    res = {
        "transfer": {"moves": [{"leaderless": x} for x in (0.010, 0.012, 0.030)]},
        "graceful_handover": {
            "clientgo": {
                "handovers": [
                    {"latency": 0.100, "stepdown": 0.050},  # 50 ms without a leader
                    {"latency": 0.090, "stepdown": 0.060},  # 30 ms
                    {"latency": 0.500, "stepdown": None},  # no step-down seen: not counted
                ]
            }
        },
    }
    p50, worst = targets(res)
    assert p50["metric"].endswith("leaderless p50") and p50["met"] is True
    assert "12 ms vs 40 ms" in p50["measured"] and "(n = 3, 2)" in p50["measured"]
    assert worst["metric"].endswith("leaderless max") and worst["met"] is True
    assert targets({"transfer": {"moves": []}}) == []
