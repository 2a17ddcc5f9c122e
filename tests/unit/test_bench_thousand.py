"""The thousand-elections accounting (bench.thousandstats): pure, no cluster."""

from __future__ import annotations

from bench.harness import AuditRequest
from bench.report import LABELS
from bench.thousandstats import etcd_counters, leases, markdown, metric, requests, window

METRICS = """\
# HELP apiserver_longrunning_requests [ALPHA] Gauge of all active long-running apiserver requests
apiserver_longrunning_requests{group="",resource="pods",scope="cluster",verb="WATCH",version="v1"} 1
apiserver_longrunning_requests{group="coordination.k8s.io",resource="leases",scope="namespace",verb="WATCH",version="v1"} 3000
apiserver_longrunning_requests{group="coordination.k8s.io",resource="leases",scope="resource",verb="WATCH",version="v1"} 1
apiserver_watch_events_total{group="coordination.k8s.io",kind="Lease",version="v1"} 1.5e+06
apiserver_watch_events_sizes_sum{group="coordination.k8s.io",resource="leases",version="v1"} 6.0e+08
apiserver_watch_events_sizes_count{group="coordination.k8s.io",resource="leases",version="v1"} 42
etcd_mvcc_put_total 1200
etcd_mvcc_range_total 900
"""


def test_a_metric_is_the_sum_of_its_matching_samples_and_only_of_its_exact_name() -> None:
    assert (
        metric(METRICS, "apiserver_longrunning_requests", resource="leases", verb="WATCH") == 3001
    )
    assert metric(METRICS, "apiserver_longrunning_requests", scope="cluster") == 1
    assert metric(METRICS, "apiserver_watch_events_sizes_sum", resource="leases") == 6.0e8
    assert metric(METRICS, "etcd_mvcc_put_total") == 1200
    assert metric(METRICS, "apiserver_registered_watchers") is None  # absent, not 0


def test_the_lease_readings_name_what_is_missing_as_none() -> None:
    got = leases(METRICS)
    assert got["open_watches"] == 3001
    # This server labels its watch events by kind, not resource: missing, not zero.
    assert got["watch_events"] is None
    assert got["watch_event_bytes"] == 6.0e8
    assert etcd_counters(METRICS) == {"puts": 1200, "deletes": None, "ranges": 900, "txns": None}


def _req(verb: str, at: float, code: int | None = 200, done: float | None = None) -> AuditRequest:
    return AuditRequest("bench:sidecar:t0-0", "", verb, "/leases/leader-t0", at, done, code)


def test_requests_count_what_was_received_in_the_window_and_the_watches_across_it() -> None:
    reqs = [
        _req("update", 99.9, done=100.1),  # before the window
        _req("update", 100.0, done=100.1),
        _req("update", 105.0, code=409, done=105.1),
        _req("get", 109.9, done=110.2),
        _req("update", 110.0, done=110.1),  # at its end: not in it
        _req("watch", 50.0, code=None),  # open across the window
        _req("watch", 50.0, code=200, done=104.0),  # closed inside it
        _req("watch", 101.0, code=None),  # opened in it: a request in it
    ]
    got = requests(reqs, 100.0, 110.0)
    assert got["requests_per_second"] == 0.4
    assert got["by_verb_per_second"] == {"get": 0.1, "update": 0.2, "watch": 0.1}
    assert got["by_verb_and_code"] == {
        "get 200": 1,
        "update 200": 1,
        "update 409": 1,
        "watch None": 1,
    }
    assert got["writes_ok_per_second"] == 0.1
    assert got["watches_open_all_window"] == 1


def _snap(wall: float, cpu: float, rev: int, events: float | None) -> dict[str, object]:
    return {
        "wall": wall,
        "cpu": {"kube-apiserver": cpu, "etcd": cpu / 4, "hosts": cpu * 2},
        "revision": rev,
        "etcd": {"puts": rev, "ranges": 2 * rev},
        "api": {"open_watches": 3001, "watch_events": events, "watch_event_bytes": None},
    }


def test_a_window_is_per_minute_for_cpu_and_per_second_for_counters() -> None:
    rss = {"kube-apiserver": [400.0, 500.0], "etcd": [60.0], "hosts": []}
    got = window(_snap(0.0, 10.0, 1000, 5.0), _snap(60.0, 40.0, 13000, 65.0), rss)
    assert got["apiserver"] == {"cpu_per_min": 30.0, "rss_mb_max": 500.0, "rss_mb_mean": 450.0}
    assert got["etcd"]["cpu_per_min"] == 7.5
    assert got["hosts_cpu_per_min"] == 60.0
    assert got["hosts_rss_mb_max"] == 0
    assert got["etcd_writes_per_second"] == 200.0
    assert got["etcd_reads_per_second"] == 400.0
    assert got["watch_events_per_second"] == 1.0
    assert got["watch_event_bytes_per_second"] is None
    assert got["open_watches"] == 3001


def test_the_table_has_a_column_per_implementation_and_one_for_the_idle_plane() -> None:
    rss = {"kube-apiserver": [400.0], "etcd": [60.0], "hosts": [900.0]}
    base = window(_snap(0.0, 10.0, 1000, 5.0), _snap(60.0, 40.0, 13000, 65.0), rss)
    run = {
        **base,
        "elections": 1000,
        "per_election": 3,
        "hosts": 10,
        "up_seconds": 42.0,
        "up_cap_seconds": 600.0,
        "stagger": 1.0,
        "led_at_start": 1000,
        "led_at_end": 999,
        "leader_changes": 0,
        **requests([_req("update", 10.0)], 0.0, 60.0),
        "idle": base,
    }
    slow = {**run, "leader_changes": 7, "up_seconds": None}
    text = markdown({"sidecar": run, "clientgo": slow}, LABELS)
    assert text.startswith("## 5c. 1,000 elections × 3 candidates at steady state")
    assert "| | grelmicro-sidecar | client-go | no candidates (before) |" in text
    assert "| API server CPU s per minute | 30.0 | 30.0 | 30.0 |" in text
    assert "| leader changes in the window | 0 | 7 | – |" in text
    assert "| elections led at the window's start / end | 1,000 / 999 | 1,000 / 999 | – |" in text
    assert "| time until every election had a leader | 42 s | not within 600 s | – |" in text
    assert "| requests/s by verb | update 0.0 | update 0.0 | – |" in text
    assert markdown({}, LABELS) == ""
    gap = markdown({"sidecar": {"gap": "every host exited"}, "clientgo": run}, LABELS)
    assert "| API server CPU s per minute | – | 30.0 | 30.0 |" in gap
    assert "**Gap (grelmicro-sidecar):** every host exited" in gap
