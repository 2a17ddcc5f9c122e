"""``status``: who leads each election, the way ``kubectl get`` shows things.

A table (``-o wide`` adds the acquisition time and duration), JSON or YAML;
``-A`` for every namespace (a NAMESPACE column first, as kubectl does);
``--watch`` prints the table, then one line per change of holder or of
``leaseTransitions`` as ``kubectl get -w`` does (polled every 2 s, the
answers of one list; Ctrl-C ends it with exit 0). Installed as the kubectl
plugin ``kubectl-grelmicro`` too, so ``kubectl grelmicro status`` works.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import sys
from typing import Any

import yaml

from ..core.lease import LeaseRecord, election_of
from ..kit.options import LOG_LEVEL, Source
from ..kube.config import ConfigError
from ..kube.errors import RBAC_FIX, ApiError, Forbidden
from ..kube.leases import LeaseStore
from . import fail
from .human import lease_store
from .settings import ALL_NAMESPACES, OUTPUT, WATCH

WATCH_SECONDS = 2.0
COLUMNS = [
    ("ELECTION", "election"),
    ("LEASE", "lease"),
    ("HOLDER", "holder"),
    ("TRANSITIONS", "lease_transitions"),
    ("RENEWED", "renewed_ago"),
    ("EXPIRES IN", "expires_in"),
]
WIDE = [("ACQUIRED", "acquired_ago"), ("DURATION", "lease_duration")]


def status(src: Source) -> int:
    src.get(LOG_LEVEL)  # status logs nothing, but a wrong level is still a wrong setting
    every, watch, output = src.get(ALL_NAMESPACES), src.get(WATCH), src.get(OUTPUT)
    try:
        store, namespace = lease_store(src, all_namespaces=every)
    except ConfigError as err:
        return fail(str(err), 2)
    where = "any namespace" if every else namespace
    try:
        if watch:
            return asyncio.run(_watch(store, output, every))
        rows = asyncio.run(_rows(store))
    except Forbidden as err:
        return fail(f"forbidden: cannot {err.verb} leases in {where}; {RBAC_FIX}", 1)
    except ApiError as err:
        return fail(f"cannot list leases in {where}: {err}", 1)
    except KeyboardInterrupt:
        return 0
    finally:
        store.close()
    if output == "json":
        print(json.dumps(rows, indent=2))
    elif output == "yaml":
        print(yaml.safe_dump(rows, sort_keys=False), end="")
    elif not rows:
        print(f"No managed leases in {where if every else f'namespace {namespace}'}.")
    else:
        print("\n".join(_table(rows, output == "wide", every)[0]))
    return 0


async def _rows(store: LeaseStore) -> list[dict[str, Any]]:
    from ..driver.sweep import SELECTOR

    items, _ = await store.list(label_selector=SELECTOR)
    now = dt.datetime.now(dt.UTC)
    rows = [_row(LeaseRecord.from_object(obj), obj, now) for obj in items]
    return sorted(rows, key=_key)


def _row(record: LeaseRecord, obj: dict[str, Any], now: dt.datetime) -> dict[str, Any]:
    expiry = record.wall_expiry()
    expires_in = "-"
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
        "renewed_ago": _ago(record.renew_time, now),
        "expires_in": expires_in,
        "acquired_ago": _ago(record.acquire_time, now),
        "lease_duration": f"{record.lease_duration}s" if record.lease_duration else "-",
    }


def _table(
    rows: list[dict[str, Any]], wide: bool, every: bool, widths: list[int] | None = None
) -> tuple[list[str], list[int]]:
    """The lines, and the column widths used; with ``widths`` (a watch's later lines), no
    header, and columns at least as wide as before, so they stay under the first table's."""
    columns = ([("NAMESPACE", "namespace")] if every else []) + COLUMNS + (WIDE if wide else [])
    cells = [] if widths else [[h for h, _ in columns]]
    cells += [[_cell(r[k]) for _, k in columns] for r in rows]
    widths = [
        max([len(row[i]) for row in cells] + [widths[i] if widths else 0])
        for i in range(len(columns))
    ]
    lines = [
        "   ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    return lines, widths


def _cell(value: Any) -> str:
    return "<none>" if value is None else str(value)


async def _watch(store: LeaseStore, output: str, every: bool) -> int:
    """The table once, then a line for each change of holder or transitions."""
    seen: dict[tuple[str, str], tuple[Any, Any]] = {}
    widths: list[int] | None = None
    while True:
        rows = await _rows(store)
        changed = [r for r in rows if seen.get(_key(r)) != (r["holder"], r["lease_transitions"])]
        seen = {_key(r): (r["holder"], r["lease_transitions"]) for r in rows}
        if changed:
            if output in ("json", "yaml"):
                for row in changed:
                    print(json.dumps(row) if output == "json" else yaml.safe_dump([row]), end="\n")
            else:
                lines, widths = _table(changed, output == "wide", every, widths)
                print("\n".join(lines))
            sys.stdout.flush()
        await asyncio.sleep(WATCH_SECONDS)


def _key(row: dict[str, Any]) -> tuple[str, str]:
    return row["namespace"], row["lease"]


def _ago(when: dt.datetime | None, now: dt.datetime) -> str:
    return "-" if when is None else _human((now - when).total_seconds())


def _human(seconds: float) -> str:
    sign = "-" if seconds < 0 else ""
    s = abs(seconds)
    if s < 120:
        return f"{sign}{s:.0f}s"
    if s < 7200:
        return f"{sign}{s / 60:.0f}m"
    return f"{sign}{s / 3600:.0f}h"
