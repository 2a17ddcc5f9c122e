"""``transfer ELECTION [--to POD]``: ask an election's leader to hand over, then wait for it.

The request goes into the election's Lease (``TRANSFER_ANNOTATION``, for the
holder's current term: a request never moves a later term), where the holder's
sidecar sees it on its watch and hands over as for ``POST /transfer`` (contract
§2, transfer). It is checked here first as the leader would check it (someone
leads; the target is a candidate the roster lists and not the holder), so a
refusal is one line and changes nothing. Then the command waits, as ``kubectl
rollout status`` does, until the Lease names a new term: exit 0 when the target
(or, without ``--to``, anyone else) leads, 1 otherwise, with what happened.
Needs ``get`` and ``patch`` on ``leases`` in the namespace.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json

from ..core import roster
from ..core.lease import TRANSFER_ANNOTATION, LeaseRecord, format_microtime, lease_name
from ..kube.errors import Conflict
from ..kube.leases import LeaseStore
from . import fail

#: How often the Lease is read while waiting for the move.
POLL = 0.1
#: Writes of the request tried before giving up on a Lease that keeps changing.
TRIES = 5


async def transfer(store: LeaseStore, election: str, to: str | None, timeout: float) -> int:
    """The exit code of one transfer of ``election``'s leadership (to ``to``, or the next)."""
    name = lease_name(election)
    for _ in range(TRIES):
        obj = await store.get(name)
        if obj is None:
            return fail(
                f"no election {election} in namespace {store.namespace} (no Lease {name})", 1
            )
        record = LeaseRecord.from_object(obj)
        refused = _refusal(record, election, to)
        if refused:
            return fail(refused, 1)
        term = (obj.get("spec") or {}).get("acquireTime")
        request = json.dumps({"to": to or "", "term": term, "asked": _now()})
        meta = {"resourceVersion": record.resource_version}
        patch = {"metadata": {**meta, "annotations": {TRANSFER_ANNOTATION: request}}}
        try:
            await store.patch(name, patch)
        except Conflict:
            continue  # renewed meanwhile: read it again
        return await _until_moved(store, record, election, to, timeout)
    return fail(f"the Lease {name} kept changing under the request; try again", 1)


def _refusal(record: LeaseRecord, election: str, to: str | None) -> str | None:
    holder = record.holder
    if holder is None or record.handoff_from is not None:
        return f"nobody leads {election} now; nothing to transfer"
    listed = [who for _, who, _ in roster.entries(roster.notes_of(record.raw), record.name)]
    others = [who for who in listed if who != holder]
    if to == holder:
        return f"{to} already leads {election}"
    if to is not None and to not in others:
        known = ", ".join(others) or "none"
        why = f"gone, not started, or standing aside while its app is unhealthy; listed: {known}"
        return f"{to} is not a candidate of {election} that a release can name ({why})"
    if not others:
        return f"no candidate of {election} but its leader {holder} is listed to take over"
    return None


async def _until_moved(
    store: LeaseStore, before: LeaseRecord, election: str, to: str | None, timeout: float
) -> int:
    clock = asyncio.get_running_loop()
    started = clock.time()
    while clock.time() - started < timeout:
        await asyncio.sleep(POLL)
        obj = await store.get(before.name)
        now = LeaseRecord.from_object(obj) if obj is not None else None
        if now is None or now.handoff_from is not None or now.holder is None:
            continue  # deleted, or the hand-off between the release and the claim
        if now.holder == before.holder and now.acquire_time == before.acquire_time:
            continue
        took = clock.time() - started
        moved = f"{election}: {before.holder} -> {now.holder} in {took:.2f}s"
        if now.holder == before.holder:
            return fail(f"{moved}: nobody claimed the hand-off, and it led again", 1)
        if to is not None and now.holder != to:
            return fail(f"{moved}, not to {to} (it did not claim the hand-off in time)", 1)
        print(moved)
        return 0
    return fail(
        f"{before.holder} still leads {election} after {timeout:g}s: its sidecar refused (see "
        "its log) or predates transfers; the request stays for its term",
        1,
    )


def _now() -> str:
    return format_microtime(dt.datetime.now(dt.UTC))
