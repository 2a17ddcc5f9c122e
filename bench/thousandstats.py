"""The thousand-elections accounting: pure functions of what the scenario read (no I/O).

``bench.thousand`` reads the API server's and etcd's ``/metrics`` text, /proc
and the audit log at the edges of a steady window; this module turns those
readings into per-second and per-minute figures and the Markdown table, so
they can be tested without a cluster.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from .harness import AuditRequest

#: The write verbs: each successful one is one etcd write (a transaction).
WRITES = ("create", "update", "patch", "delete")


def metric(text: str, name: str, **labels: str) -> float | None:
    """The sum of the samples of ``name`` whose labels include ``labels`` (exact name, so
    ``_sum`` and ``_bucket`` series are not counted); None when there is no such sample."""
    wanted = [f'{k}="{v}"' for k, v in labels.items()]
    total, found = 0.0, False
    for line in text.splitlines():
        if not line.startswith(name) or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        series, _, rest = head.partition("{")
        if series != name or not all(w in rest for w in wanted):
            continue
        total, found = total + float(value), True
    return total if found else None


def leases(text: str) -> dict[str, float | None]:
    """The API server's Lease counters and gauges in one ``/metrics`` text."""
    return {  # apiserver_registered_watchers is gone (1.36): the open WATCH requests instead
        "open_watches": metric(
            text, "apiserver_longrunning_requests", resource="leases", verb="WATCH"
        ),
        "watch_events": metric(text, "apiserver_watch_events_total", resource="leases"),
        "watch_event_bytes": metric(text, "apiserver_watch_events_sizes_sum", resource="leases"),
    }


def etcd_counters(text: str) -> dict[str, float | None]:
    """etcd's own count of the keys it wrote, deleted and read (``/metrics``)."""
    return {
        "puts": metric(text, "etcd_mvcc_put_total"),
        "deletes": metric(text, "etcd_mvcc_delete_total"),
        "ranges": metric(text, "etcd_mvcc_range_total"),
        "txns": metric(text, "etcd_mvcc_txn_total"),
    }


def rate(a: float | None, b: float | None, seconds: float) -> float | None:
    return None if a is None or b is None or seconds <= 0 else round((b - a) / seconds, 2)


def window(
    begin: dict[str, Any], end: dict[str, Any], rss: dict[str, list[float]]
) -> dict[str, Any]:
    """Per minute and per second over a window, from its two snapshots (``thousand.snapshot``)
    and the RSS sampled in it, MB per process name."""
    secs = float(end["wall"] - begin["wall"])

    def per_min(key: str) -> float:
        return round(float(end["cpu"][key] - begin["cpu"][key]) * 60 / secs, 2)

    def proc(name: str) -> dict[str, Any]:
        mb = rss[name] or [0.0]
        return {"cpu_per_min": per_min(name), "rss_mb_max": round(max(mb), 1),
                "rss_mb_mean": round(sum(mb) / len(mb), 1)}  # fmt: skip

    def per_s(*key: str) -> float | None:
        a: Any = begin
        b: Any = end
        for k in key:
            a, b = a[k], b[k]
        return rate(a, b, secs)

    return {
        "begin": begin["wall"], "end": end["wall"], "window_seconds": round(secs, 1),
        "apiserver": proc("kube-apiserver"), "etcd": proc("etcd"),
        "hosts_cpu_per_min": per_min("hosts"), "hosts_rss_mb_max": round(max(rss["hosts"] or [0]), 1),
        "etcd_writes_per_second": per_s("revision"),
        "etcd_puts_per_second": per_s("etcd", "puts"),
        "etcd_reads_per_second": per_s("etcd", "ranges"),
        "open_watches": end["api"]["open_watches"],
        "watch_events_per_second": per_s("api", "watch_events"),
        "watch_event_bytes_per_second": per_s("api", "watch_event_bytes"),
    }  # fmt: skip


def requests(reqs: Iterable[AuditRequest], start: float, end: float) -> dict[str, Any]:
    """The requests received in [start, end): per second in all and by verb, the successful
    writes per second, the answers by verb and code; the watches open across the whole
    window (opened before it, not closed before its end)."""
    seconds = end - start
    inside = [r for r in reqs if start <= r.received < end]
    by_verb = Counter(r.verb for r in inside)
    by_code = Counter(f"{r.verb} {r.code}" for r in inside)
    ok = sum(r.verb in WRITES and r.code is not None and r.code < 300 for r in inside)
    spanning = sum(
        r.verb == "watch" and r.received < start and (r.completed is None or r.completed >= end)
        for r in reqs
    )
    return {
        "requests_per_second": round(len(inside) / seconds, 2),
        "by_verb_per_second": {v: round(n / seconds, 2) for v, n in sorted(by_verb.items())},
        "by_verb_and_code": dict(sorted(by_code.items())),
        "writes_ok_per_second": round(ok / seconds, 2),
        "watches_open_all_window": spanning,
    }


def _num(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{x:,.{digits}f}"


def markdown(res: dict[str, Any], labels: dict[str, str]) -> str:
    """The section of RESULTS.md (and of bench/README.md, from results/thousand.json)."""
    impls = [k for k in ("sidecar", "clientgo") if k in res]
    done = [res[k] for k in impls if "gap" not in res[k]]
    if not impls:
        return ""
    first = done[0] if done else res[impls[0]]
    idle = next((r["idle"] for r in done if "idle" in r), None)
    n, per = first.get("elections", 0), first.get("per_election", 0)
    head = (
        f"## 5c. {n:,} elections × {per} candidates at steady state\n\n"
        f"{n:,} elections × {per} candidates, "
        f"{first.get('hosts')} processes hosting them, each candidate with its own client "
        f"certificate and connection; a {first.get('window_seconds')} s window after every "
        "election had a leader (or a cap) and a warm-up; each process starting one "
        f"candidate every {first.get('stagger')} s; one implementation at a time, the API "
        "server and etcd restarted before each.\n"
    )
    rows: list[tuple[str, Any]] = [
        ("API server CPU s per minute", lambda r: _num(r["apiserver"]["cpu_per_min"])),
        ("API server RSS, MB (max in the window)", lambda r: _num(r["apiserver"]["rss_mb_max"], 0)),
        ("etcd CPU s per minute", lambda r: _num(r["etcd"]["cpu_per_min"])),
        ("etcd RSS, MB (max in the window)", lambda r: _num(r["etcd"]["rss_mb_max"], 0)),
        ("etcd writes/s (revisions)", lambda r: _num(r["etcd_writes_per_second"])),
        ("etcd reads/s (ranges)", lambda r: _num(r["etcd_reads_per_second"])),
        ("requests/s (audit log)", lambda r: _num(r["requests_per_second"])),
        ("requests/s by verb", lambda r: _verbs(r["by_verb_per_second"])),
        ("successful writes/s (audit log)", lambda r: _num(r["writes_ok_per_second"])),
        ("open watches on Leases", lambda r: _num(r["open_watches"], 0)),
        ("Lease watch events/s", lambda r: _num(r["watch_events_per_second"])),
        ("elections led at the window's start / end", lambda r: _led(r)),
        ("leader changes in the window", lambda r: str(r["leader_changes"])),
        ("candidates' CPU s per minute (all hosts)", lambda r: _num(r["hosts_cpu_per_min"])),
        ("candidates' RSS, MB (all hosts)", lambda r: _num(r["hosts_rss_mb_max"], 0)),
        ("time until every election had a leader", lambda r: _up(r)),
    ]
    cols = [res[k] for k in impls] + ([idle] if idle else [])
    names = [labels.get(k, k) for k in impls] + (["no candidates (before)"] if idle else [])
    lines = [head, "| | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for name, cell in rows:
        lines.append(f"| {name} | " + " | ".join(_cell(cell, r) for r in cols) + " |")
    gaps = [f"**Gap ({labels.get(k, k)}):** {res[k]['gap']}\n" for k in impls if "gap" in res[k]]
    return "\n".join(lines) + "\n" + "".join("\n" + g for g in gaps) + NOTE


NOTE = (
    "\nAPI server and etcd: CPU from /proc over the window, RSS sampled every 5 s; etcd "
    "writes are its revisions (one per write transaction, whoever wrote), reads its range "
    "calls (`/metrics`); requests and successful writes are the candidates' own, from the "
    "audit log (Metadata level, one line per request: its cost is in the API server's "
    "CPU); open watches are the API server's WATCH requests on Leases "
    "(`apiserver_longrunning_requests`). The last column is the same control plane, "
    "restarted, for 20 s before the first implementation's candidates started.\n"
)


def _led(r: dict[str, Any]) -> str:
    return f"{r['led_at_start']:,} / {r['led_at_end']:,}"


def _up(r: dict[str, Any]) -> str:
    if r["up_seconds"] is None:
        return f"not within {r['up_cap_seconds']:.0f} s"
    return f"{r['up_seconds']:.0f} s"


def _cell(cell: Any, r: dict[str, Any]) -> str:
    try:
        return str(cell(r))
    except (KeyError, TypeError):
        return "–"


def _verbs(per_second: dict[str, float]) -> str:
    return ", ".join(f"{v} {n:,.1f}" for v, n in sorted(per_second.items(), key=lambda x: -x[1]))
