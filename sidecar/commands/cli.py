"""``grelmicro-sidecar run|lock|injector|status|cleanup|transfer``: argv in, exit code out (contract §7).

``run``, ``lock`` (module ``run``) and ``injector`` are imported only when they run: ``run``
never pays for kopf. ``status`` and ``cleanup`` live here: the kubeconfig loaded as kubectl
does (``--context``, ``--as``, plugins), then ``kubectl get``'s output, or one sweep.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import sys
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from .. import __version__
from ..core.defaults import PROG
from ..core.lease import LeaseRecord, election_of, lease_name
from ..core.shards import MEMBER_LABEL, shard_of
from ..kit import options
from ..kit.logs import Logger
from ..kit.options import SIDECAR_ENV, Parser, SettingsError, Source, add_settings, env_note
from ..kube.config import ConfigError, load, resolve_namespace
from ..kube.errors import RBAC_FIX, ApiError, Forbidden
from ..kube.leases import LeaseStore
from ..kube.sweep import SELECTOR, Sightings, sweep
from . import fail
from . import main as main  # the console script, also as ``python -m sidecar.commands.cli``
from .settings import ALL_NAMESPACES, COMMANDS, OUTPUT, TO, WAIT, WATCH
from .transfer import transfer as move

COLUMNS = {"LEASE": "lease", "HOLDER": "holder",  # header: row key; after ELECTION (SHARD)
           "TRANSITIONS": "lease_transitions", "RENEWED": "renewed_ago",
           "EXPIRES IN": "expires_in"}  # fmt: skip
WIDE = {"ACQUIRED": "acquired_ago", "DURATION": "lease_duration"}
CHANGES = ("namespace", "lease", "holder", "lease_transitions")  # what --watch reports
Go = Callable[[LeaseStore, str], Coroutine[Any, Any, int]]


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command but ``injector``, from their tables (``settings``)."""
    parser = Parser(prog=PROG, description="Kubernetes leader election over Leases, as a sidecar.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for name, (help_, about, table) in COMMANDS.items():
        p = sub.add_parser(name, help=help_, description=f"{about} {env_note(SIDECAR_ENV)}".strip())
        add_settings(p, table)
        if name == "lock":
            p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD [ARG ...]")
        if name == "transfer":
            p.add_argument("election_name", metavar="ELECTION", help="the election's name")
    sub.add_parser(
        "injector", help="run the admission webhook that injects the sidecar", add_help=False
    )
    return parser


def command(argv: list[str], environ: Mapping[str, str]) -> int:
    """One command, its flags backed by ``environ``: a bad setting is exit 2 and one line."""
    if argv[:1] == ["injector"]:
        from ..injector.main import main as injector_main  # kopf is only imported here

        return injector_main(argv[1:], environ)
    try:
        args = build_parser().parse_args(argv)
        src = Source(args, SIDECAR_ENV, environ)
        if args.command in ("run", "lock"):
            from .run import lock, run

            return run(src) if args.command == "run" else lock(src)
        if args.command == "transfer":
            return transfer(src)
        return status(src) if args.command == "status" else cleanup(src)
    except SettingsError as err:  # a UsageError too, which names the program already
        print(str(err) if str(err).startswith(PROG) else f"{PROG}: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def kubectl_plugin() -> int:
    """``kubectl grelmicro status|cleanup ...``: kubectl finds ``kubectl-grelmicro`` on PATH."""
    if sys.argv[1:2] not in (["status"], ["cleanup"], ["transfer"], ["-h"], ["--help"]):
        print(
            "usage: kubectl grelmicro status|cleanup|transfer [flags] (see --help)", file=sys.stderr
        )
        return 2
    return main(sys.argv[1:])


def status(src: Source) -> int:
    import yaml  # only here: run never loads it

    src.get(options.LOG_LEVEL)  # status logs nothing, but a wrong level is still a wrong setting
    every, watch, output = src.get(ALL_NAMESPACES), src.get(WATCH), src.get(OUTPUT)

    async def show(store: LeaseStore, namespace: str) -> int:
        """Once; with ``--watch``, the table then a line for each change of holder or
        transitions, as ``kubectl get -w`` (polled; Ctrl-C ends it, exit 0). A SHARD
        column when the first listing has a sharded election."""
        seen: set[tuple[Any, ...]] = set()
        rows = await _rows(store)
        columns = _columns(rows, every, output == "wide")
        widths = [0] * len(columns)
        while True:
            marks = {tuple(map(r.get, CHANGES)): r for r in rows}
            changed = [r for mark, r in marks.items() if mark not in seen]
            seen = set(marks)
            if not watch and output == "json":
                print(json.dumps(rows, indent=2))
            elif not watch and output == "yaml":
                print(yaml.safe_dump(rows, sort_keys=False), end="")
            elif not (watch or rows):
                where = "any namespace" if every else f"namespace {namespace}"
                print(f"No managed leases in {where}.")
            elif changed and output in ("json", "yaml"):
                for row in changed:
                    print(json.dumps(row) if output == "json" else yaml.safe_dump([row]), end="\n")
            elif changed:
                print("\n".join(_table(changed, columns, widths)))
            if not watch:
                return 0
            sys.stdout.flush()
            await asyncio.sleep(2.0)  # contract §7
            rows = await _rows(store)

    return _on_leases(src, show, "cannot list leases in", every, ctrl_c=0)


def cleanup(src: Source) -> int:
    level, margin = src.get(options.LOG_LEVEL), src.get(options.MARGIN)

    async def go(store: LeaseStore, namespace: str) -> int:
        log, sightings = Logger(level, namespace=namespace), Sightings()
        # No clock is trusted (contract §5): what looks expired is watched for duration + margin.
        result = await sweep(store, log, sightings=sightings, margin=margin)
        if result.kept_unconfirmed:
            # At most 5 minutes: a longer Lease is left to the injector's sweep or a later run.
            wait = min(result.confirm_in, 300.0)
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


def transfer(src: Source) -> int:
    election, to, timeout = src.args.election_name, src.get(TO), src.get(WAIT)
    src.get(options.LOG_LEVEL)
    try:
        lease_name(election)
    except ValueError as err:
        return fail(f"election {election!r}: {err}", 2)

    async def go(store: LeaseStore, namespace: str) -> int:
        return await move(store, election, to, timeout)

    # A person's account needs less than a pod's (docs/operations.md, Moving leadership).
    needs = "transfer needs get and patch on leases.coordination.k8s.io, for whoever runs it"
    return _on_leases(src, go, f"cannot transfer {election} in", fix=needs)


def _on_leases(
    src: Source,
    go: Go,
    failed: str,
    every: bool = False,
    ctrl_c: int = 130,
    fix: str = RBAC_FIX,
) -> int:
    """The exit code of ``go(store, namespace)``; 2 for a configuration that cannot work, 1
    for an API error (``failed`` starts its line; ``fix`` follows a 403), ``ctrl_c`` on
    Ctrl-C. ``every``: ``-A``."""
    try:
        config = load(
            src.raw("kubeconfig") or None,
            src.raw("context") or None,
            as_user=src.raw("as") or None,
            as_groups=tuple(src.args.as_group or ()),
            plugins=True,
        )
        namespace = resolve_namespace(src.get(options.NAMESPACE), config)
        store = LeaseStore(config, "" if every else namespace)
    except ConfigError as err:
        return fail(str(err), 2)
    where = "any namespace" if every else namespace
    try:
        return asyncio.run(go(store, namespace))
    except Forbidden as err:
        return fail(f"forbidden: cannot {err.verb} leases in {where}; {fix}", 1)
    except ApiError as err:
        return fail(f"{failed} {where}: {err}", 1)
    except KeyboardInterrupt:  # status --watch ends so, exit 0
        return ctrl_c
    finally:
        store.close()


def _columns(rows: list[dict[str, Any]], every: bool, wide: bool) -> dict[str, str]:
    """Header -> row key: NAMESPACE with ``-A``, SHARD when a row is a shard."""
    sharded = any(r["shard"] is not None for r in rows)
    columns = {"NAMESPACE": "namespace"} if every else {}
    columns |= {"ELECTION": "election"} | ({"SHARD": "shard"} if sharded else {})
    return columns | COLUMNS | (WIDE if wide else {})


async def _rows(store: LeaseStore) -> list[dict[str, Any]]:
    """A row per election's Lease, and per shard's; members' heartbeats are no election."""
    items, _ = await store.list(label_selector=SELECTOR)
    now = dt.datetime.now(dt.UTC)
    records = (LeaseRecord.from_object(obj) for obj in items)
    rows = (_row(r, now) for r in records if MEMBER_LABEL not in r.labels)
    return sorted(rows, key=lambda r: (r["namespace"], r["election"], r["shard"] or 0, r["lease"]))


def _row(record: LeaseRecord, now: dt.datetime) -> dict[str, Any]:
    def ago(when: dt.datetime | None) -> str:
        return "-" if when is None else _human((now - when).total_seconds())

    expiry, expires_in = record.wall_expiry(), "-"
    if record.holder is None:
        expires_in = "released"
    elif expiry is not None:
        left = (expiry - now).total_seconds()
        expires_in = _human(left) if left > 0 else f"expired {_human(-left)} ago"
    lease, shard = shard_of(record.name, record.labels) or (record.name, None)
    return {
        "namespace": record.namespace,
        "election": election_of(lease),
        "shard": shard,
        "lease": record.name,
        "holder": record.holder,
        "lease_transitions": record.transitions,
        "renewed_ago": ago(record.renew_time),
        "expires_in": expires_in,
        "acquired_ago": ago(record.acquire_time),
        "lease_duration": f"{record.lease_duration}s" if record.lease_duration else "-",
    }


def _table(rows: list[dict[str, Any]], columns: dict[str, str], widths: list[int]) -> list[str]:
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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
