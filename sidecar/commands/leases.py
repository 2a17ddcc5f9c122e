"""``status`` and ``cleanup``: the managed Leases as a person sees and tidies them (contract §7).

Both load the kubeconfig as kubectl does (``--context``, ``--as``, ``--as-group``, credential
plugins). ``status`` prints like ``kubectl get``; ``cleanup`` sweeps once, trusting no clock.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import sys
from collections.abc import Callable, Coroutine
from typing import Any

import yaml

from ..core.lease import LeaseRecord, election_of
from ..kit.logs import Logger
from ..kit.options import LOG_LEVEL, MARGIN, NAMESPACE, Source
from ..kube.config import ConfigError, load
from ..kube.errors import RBAC_FIX, ApiError, Forbidden
from ..kube.leases import LeaseStore
from ..kube.namespace import resolve_namespace
from . import fail
from .settings import ALL_NAMESPACES, OUTPUT, WATCH

#: ``cleanup`` watches expired-looking Leases at most this long before judging
#: (a Lease with a longer duration is left to the injector's sweep or a later run).
CLEANUP_MAX_WAIT = 300.0
#: header: row key
COLUMNS = {"ELECTION": "election", "LEASE": "lease", "HOLDER": "holder",
           "TRANSITIONS": "lease_transitions", "RENEWED": "renewed_ago", "EXPIRES IN": "expires_in"}  # fmt: skip
WIDE = {"ACQUIRED": "acquired_ago", "DURATION": "lease_duration"}
Row = dict[str, Any]
Go = Callable[[LeaseStore, str], Coroutine[Any, Any, int]]


def status(src: Source) -> int:
    src.get(LOG_LEVEL)  # status logs nothing, but a wrong level is still a wrong setting
    every, watch, output = src.get(ALL_NAMESPACES), src.get(WATCH), src.get(OUTPUT)
    columns = {"NAMESPACE": "namespace"} if every else {}
    columns |= COLUMNS | (WIDE if output == "wide" else {})

    async def show(store: LeaseStore, namespace: str) -> int:
        """Once; with ``--watch``, the table then a line for each change of holder or
        transitions, as ``kubectl get -w`` (polled; Ctrl-C ends it, exit 0)."""
        seen: set[tuple[Any, ...]] = set()
        widths = [0] * len(columns)
        while True:
            rows = await _rows(store)
            if not watch:
                if output == "json":
                    print(json.dumps(rows, indent=2))
                elif output == "yaml":
                    print(yaml.safe_dump(rows, sort_keys=False), end="")
                elif not rows:
                    where = "any namespace" if every else f"namespace {namespace}"
                    print(f"No managed leases in {where}.")
                else:
                    print("\n".join(_table(rows, columns, widths)))
                return 0
            marks = [
                (r["namespace"], r["lease"], r["holder"], r["lease_transitions"]) for r in rows
            ]
            changed = [r for r, mark in zip(rows, marks, strict=True) if mark not in seen]
            seen = set(marks)
            if changed and output in ("json", "yaml"):
                for row in changed:
                    print(json.dumps(row) if output == "json" else yaml.safe_dump([row]), end="\n")
            elif changed:
                print("\n".join(_table(changed, columns, widths)))
            sys.stdout.flush()
            await asyncio.sleep(2.0)  # contract §7

    return _on_leases(src, show, "cannot list leases in", every, interrupted=0)


def cleanup(src: Source) -> int:
    level, margin = src.get(LOG_LEVEL), src.get(MARGIN)

    async def go(store: LeaseStore, namespace: str) -> int:
        from ..driver.sweep import Sightings, sweep

        log, sightings = Logger(level, namespace=namespace), Sightings()
        # No clock is trusted (contract §5): a Lease that looks expired is
        # watched until it has stayed unchanged for its duration + margin.
        result = await sweep(store, log, sightings=sightings, margin=margin)
        if result.kept_unconfirmed:
            wait = min(result.confirm_in, CLEANUP_MAX_WAIT)
            note = f"watching {result.kept_unconfirmed} expired-looking lease(s) for {wait:.0f}s"
            print(note, "to confirm nobody renews them", file=sys.stderr, flush=True)
            await asyncio.sleep(wait)
            result = await sweep(store, log, sightings=sightings, margin=margin)
        print(
            f"deleted {len(result.deleted)} expired lease(s); kept {result.kept_live} live, "
            f"{result.kept_unreadable} unreadable, {result.kept_unconfirmed} not yet confirmed; "
            f"{result.skipped_changed} changed under us"
        )
        if not result.errors:
            return 0
        # The sweep went on past each failure (logged above); the job is not done.
        why = "if forbidden, allow delete on leases.coordination.k8s.io for this account"
        lost = f"could not delete {result.errors} expired lease(s) in {namespace}"
        return fail(f"{lost} (the warnings above say why); {why}", 1)

    return _on_leases(src, go, "cleanup failed in")


def _on_leases(
    src: Source, go: Go, failed: str, every: bool = False, interrupted: int = 130
) -> int:
    """The exit code of ``go(store, namespace)``; 2 for a configuration that cannot work, 1
    for an API error (``failed`` starts its line). ``every``: all namespaces (``status -A``)."""
    try:
        config = load(
            src.raw("kubeconfig") or None,
            src.raw("context") or None,
            as_user=src.raw("as") or None,
            as_groups=tuple(src.args.as_group or ()),
            plugins=True,
        )
        namespace = resolve_namespace(src.get(NAMESPACE), config)
        store = LeaseStore(config, "" if every else namespace)
    except ConfigError as err:
        return fail(str(err), 2)
    where = "any namespace" if every else namespace
    try:
        return asyncio.run(go(store, namespace))
    except Forbidden as err:
        return fail(f"forbidden: cannot {err.verb} leases in {where}; {RBAC_FIX}", 1)
    except ApiError as err:
        return fail(f"{failed} {where}: {err}", 1)
    except KeyboardInterrupt:  # status --watch ends so, exit 0
        return interrupted
    finally:
        store.close()


async def _rows(store: LeaseStore) -> list[Row]:
    from ..driver.sweep import SELECTOR

    items, _ = await store.list(label_selector=SELECTOR)
    now = dt.datetime.now(dt.UTC)
    rows = (_row(LeaseRecord.from_object(obj), obj, now) for obj in items)
    return sorted(rows, key=lambda r: (r["namespace"], r["lease"]))


def _row(record: LeaseRecord, obj: dict[str, Any], now: dt.datetime) -> Row:
    def ago(when: dt.datetime | None) -> str:
        return "-" if when is None else _human((now - when).total_seconds())

    expiry, expires_in = record.wall_expiry(), "-"
    if record.holder is None:
        expires_in = "released"
    elif expiry is not None:
        left = (expiry - now).total_seconds()
        expires_in = _human(left) if left > 0 else f"expired {_human(-left)} ago"
    return {
        "namespace": str((obj.get("metadata") or {}).get("namespace", "")),
        "election": election_of(record.name),
        "lease": record.name,
        "holder": record.holder,
        "lease_transitions": record.transitions,
        "renewed_ago": ago(record.renew_time),
        "expires_in": expires_in,
        "acquired_ago": ago(record.acquire_time),
        "lease_duration": f"{record.lease_duration}s" if record.lease_duration else "-",
    }


def _table(rows: list[Row], columns: dict[str, str], widths: list[int]) -> list[str]:
    """The lines, the header first while ``widths`` are 0; ``widths`` grow to the widest cell
    seen, so that a watch's later lines stay under the first table's columns."""
    cells = [] if any(widths) else [list(columns)]
    cells += [["<none>" if r[k] is None else str(r[k]) for k in columns.values()] for r in rows]
    widths[:] = [max([w, *(len(row[i]) for row in cells)]) for i, w in enumerate(widths)]
    return ["   ".join(map(str.ljust, row, widths)).rstrip() for row in cells]


def _human(seconds: float) -> str:
    s = abs(seconds)
    text = f"{s:.0f}s" if s < 120 else f"{s / 60:.0f}m" if s < 7200 else f"{s / 3600:.0f}h"
    return ("-" if seconds < 0 else "") + text
