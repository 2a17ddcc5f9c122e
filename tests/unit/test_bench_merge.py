"""``python -m bench --only ... --merge``: a partial run replaces only what it measured."""

from __future__ import annotations

from bench.__main__ import merged


def _meta(commit: str) -> dict[str, object]:
    return {
        "mode": "full",
        "started": "2026-11-30 09:00:00Z",
        "finished": "2026-11-30 09:10:00Z",
        "loadavg_start": [1.0, 1.0, 1.0],
        "loadavg_end": [1.5, 1.2, 1.1],
        "source": {"commit": commit, "dirty": False},
    }


def test_a_partial_run_replaces_its_sections_keeps_the_rest_and_says_so() -> None:
    earlier = {
        "graceful_handover": {"old": 1},
        "crash_failover": {"kept": 1},
        "meta": _meta("aaaaaaa111"),
        "notes": ["an earlier note"],
        "targets": [{"id": "1"}],
    }
    partial = {
        "graceful_handover": {"new": 1},
        "transfer": {"moves": []},
        "meta": _meta("bbbbbbb222"),
        "notes": [],
        "targets": [],
    }
    out = merged(earlier, partial)
    assert out["graceful_handover"] == {"new": 1} and out["transfer"] == {"moves": []}
    assert out["crash_failover"] == {"kept": 1}
    assert out["meta"]["source"]["commit"] == "aaaaaaa111"  # the whole run's description
    assert out["notes"][0] == "an earlier note"
    assert out["notes"][1].startswith("graceful_handover, transfer: from a later run (full")
    assert "on bbbbbbb, 2026-11-30 09:00:00Z to 2026-11-30 09:10:00Z" in out["notes"][1]


def test_a_section_measured_again_is_named_only_by_its_newest_run() -> None:
    first = merged(
        {"shards": {"old": 1}, "meta": _meta("aaaaaaa111"), "notes": []},
        {"shards": {}, "transfer": {}, "meta": _meta("bbbbbbb222"), "notes": []},
    )
    again = merged(first, {"shards": {"new": 1}, "meta": _meta("ccccccc333"), "notes": []})
    assert again["shards"] == {"new": 1}
    assert [n.split(" (full")[0] for n in again["notes"]] == [
        "transfer: from a later run",  # what bbbbbbb measured and nothing since
        "shards: from a later run",
    ]
    assert "on ccccccc" in again["notes"][1] and "on bbbbbbb" in again["notes"][0]
