"""The roster's format: who a releasing leader may hand its Lease to (contract §2, hand-off).

When a leader releases with nobody named, every follower sees the emptied
Lease through its watch at the same instant and claims it: at 50 candidates,
one write wins and 49 get a 409 and re-read, for every handover. A release
that names one successor (``lease.vacate(successor=)``) costs one claim. To
name one, the leader must know who is there, and followers make no requests
while they follow; so each candidate writes its name once, when it starts,
into a small Lease next to the election's (``leader-main.candidates``), and
takes it out when it stops gracefully. The leader names the candidate that
joined last: during a rolling update that is a pod of the new revision, which
the rollout will not stop next.

Pure: the object's name, its entries (one annotation each, keyed by a checksum
of the identity, so joins are merge patches that never conflict), reading
them tolerantly, and the pick. The object is labelled ``managed-by:
grelmicro-sidecar`` (not ``grelmicro``), so sweeps, ``status`` and grelmicro
peers never see it.
"""

from __future__ import annotations

import binascii
import datetime as dt
import json
from typing import Any

from .lease import format_microtime, parse_time

SUFFIX = ".candidates"
#: Entries are annotations under this prefix, one per candidate, keyed by a checksum of its identity.
ENTRY_PREFIX = "candidates.leader-election.grelmicro.io/"
COMPONENT = "candidates"
LABELS = {
    "app.kubernetes.io/managed-by": "grelmicro-sidecar",
    "app.kubernetes.io/component": COMPONENT,
}


def roster_name(lease: str) -> str | None:
    """``<lease>.candidates``; None when that is longer than a Lease name may be.

    Election Lease names never hold a dot (``lease.lease_name``), so this one
    cannot be another election's Lease.
    """
    name = lease + SUFFIX
    return name if len(name) <= 253 else None


def entry_key(identity: str) -> str:
    """The annotation key of ``identity``'s entry (any identity fits an annotation name).

    CRC-32, not a cryptographic hash: two identities sharing a key cost nothing
    unsafe (one entry hides the other, so that candidate is not named and
    claims like any follower). The entry's value holds the identity itself.
    """
    return f"{ENTRY_PREFIX}{binascii.crc32(identity.encode()):08x}"


def entry(identity: str, joined: dt.datetime) -> dict[str, str]:
    """The annotation that lists ``identity`` as joined at ``joined``."""
    value = {"identity": identity, "joined": format_microtime(joined)}
    return {entry_key(identity): json.dumps(value, separators=(",", ":"))}


def _metadata_map(obj: dict[str, Any] | None, key: str) -> dict[Any, Any]:
    meta = (obj or {}).get("metadata")
    found = meta.get(key) if isinstance(meta, dict) else None
    return found if isinstance(found, dict) else {}


def entries(obj: dict[str, Any] | None) -> list[tuple[dt.datetime, str]]:
    """(joined at, identity) of every readable entry of a roster object, oldest first.

    Tolerant like ``LeaseRecord``: an entry someone edited into garbage is skipped.
    """
    found = []
    for key, value in _metadata_map(obj, "annotations").items():
        if not (isinstance(key, str) and key.startswith(ENTRY_PREFIX) and isinstance(value, str)):
            continue
        try:
            item = json.loads(value)
        except ValueError:
            continue
        if not isinstance(item, dict):
            continue
        identity, joined = item.get("identity"), parse_time(item.get("joined"))
        if isinstance(identity, str) and identity and joined is not None:
            found.append((joined, identity))
    return sorted(found)


def successor(obj: dict[str, Any] | None, identity: str) -> str | None:
    """The candidate of roster ``obj`` that joined last, other than ``identity``; None if none.

    An object without the roster's label is not one we wrote: it names nobody.
    """
    if _metadata_map(obj, "labels").get("app.kubernetes.io/component") != COMPONENT:
        return None
    others = [who for _, who in entries(obj) if who != identity]
    return others[-1] if others else None
