"""Who may be named in a hand-off (each election's own Lease), and the namespace's coordination Lease.

The roster of an election lives in annotations of its own Lease (contract §2,
"the roster"): an entry per candidate (``candidates.…/<key>``: election,
identity, when it joined), written by a merge patch over the version read,
by a follower only while fewer than ``SEATS`` recent entries of others are
listed (``room``); at most ``KEEP`` (a joiner drops the oldest). A release
names from the object it writes over, so the name costs no request.

One object per namespace, ``grelmicro-sidecar`` (contract §2, "the
coordination Lease"), holds what outlives an election's Lease or concerns the
whole namespace: ``kubectl get leases`` shows it beside one Lease per
election, with no holder; it is labelled ``managed-by: grelmicro-sidecar``
(not ``grelmicro``), so sweeps, ``status`` and grelmicro peers never see it.
In its annotations:

- the marks of the elections that have had a Lease (``core.marks``): without
  one, a Lease that is absent was never created, so its first leader need not
  wait (contract §2). A coordination Lease younger than a lease duration
  (``settled``) is no proof that nobody led: it may have been deleted along
  with marks that mattered;
- the sweep duty (``sweeper.…``): who sweeps at exit, until when.

Pure: names, keys (CRC-32 of what they stand for; two sharing a key cost
nothing unsafe), reading tolerantly, the picks.
"""

from __future__ import annotations

import binascii
import datetime as dt
import json
from collections.abc import Iterable
from typing import Any

from .lease import LeaseRecord, format_microtime, lease_object, parse_time

NAME = "grelmicro-sidecar"
LABELS = {
    "app.kubernetes.io/managed-by": "grelmicro-sidecar",
    "app.kubernetes.io/component": "coordination",
}
ENTRY = "candidates.leader-election.grelmicro.io/"
DUTY = "sweeper.leader-election.grelmicro.io"
#: Roster entries kept per election: a candidate that died without leaving is dropped in time.
KEEP = 16
#: Candidates that may be listed at once besides the holder: a follower joins only while
#: fewer recent entries are listed, so in an election of hundreds of candidates a few
#: write the Lease, not all of them, each write a watch event to every candidate.
SEATS = 3
#: An entry older than this (seconds) no longer takes a seat: a candidate killed without
#: leaving stops keeping the live ones out, and a newer one is named before it.
SEAT_TTL = 600


def _key(prefix: str, *parts: str) -> str:
    return f"{prefix}{binascii.crc32('/'.join(parts).encode()):08x}"


def _value(**fields: str | int) -> str:
    return json.dumps(fields, separators=(",", ":"))


def notes_of(obj: dict[str, Any] | None) -> dict[str, str]:
    meta = (obj or {}).get("metadata")
    found = meta.get("annotations") if isinstance(meta, dict) else None
    if not isinstance(found, dict):
        return {}
    return {k: v for k, v in found.items() if isinstance(k, str) and isinstance(v, str)}


def version_of(obj: dict[str, Any] | None) -> str | None:
    """The resourceVersion of the object as read (None when absent): what a write goes over."""
    meta = (obj or {}).get("metadata")
    version = meta.get("resourceVersion") if isinstance(meta, dict) else None
    return version if isinstance(version, str) and version else None


def read_value(value: str) -> dict[str, Any]:
    """An annotation's JSON object, read tolerantly ({} for garbage or another type)."""
    try:
        item = json.loads(value)
    except ValueError:
        return {}
    return item if isinstance(item, dict) else {}


def new_object(namespace: str, notes: dict[str, str]) -> dict[str, Any]:
    return lease_object(NAME, namespace, LABELS, annotations=notes)


def entry_key(lease: str, identity: str) -> str:
    return _key(ENTRY, lease, identity)


def entry(lease: str, identity: str, joined: dt.datetime) -> dict[str, str]:
    """The annotation that lists ``identity`` as a candidate of ``lease`` since ``joined``."""
    value = _value(lease=lease, identity=identity, joined=format_microtime(joined))
    return {entry_key(lease, identity): value}


def _entry(value: str, lease: str) -> tuple[str, dt.datetime] | None:
    """(identity, joined) of a readable entry of ``lease``; None for garbage or another lease.

    A value that does not hold the lease's name as a JSON string is another lease's, and is
    not parsed (a Lease name is a DNS subdomain, written without escapes).
    """
    if f'"{lease}"' not in value:
        return None
    item = read_value(value)
    identity, joined = item.get("identity"), parse_time(item.get("joined"))
    if item.get("lease") == lease and isinstance(identity, str) and identity and joined:
        return identity, joined
    return None


def entries(notes: dict[str, str], lease: str) -> list[tuple[dt.datetime, str, str]]:
    """(joined, identity, key) of ``lease``'s readable entries, oldest first (garbage is skipped)."""
    found = []
    for key, value in notes.items():
        if key.startswith(ENTRY) and (read := _entry(value, lease)) is not None:
            found.append((read[1], read[0], key))
    return sorted(found)


def entry_of(notes: dict[str, str], lease: str, identity: str) -> tuple[str, dt.datetime] | None:
    """(annotation value, joined) of ``identity``'s entry of ``lease``; None if absent or garbage."""
    value = notes.get(entry_key(lease, identity))
    if value is None or (read := _entry(value, lease)) is None or read[0] != identity:
        return None
    return value, read[1]


def entries_only(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Whether Lease object ``after``'s annotations differ from ``before``'s, and only in
    roster entries: a candidate joining or leaving (the caller compares the rest)."""
    old, new = _annotations(before), _annotations(after)
    changed = {key for key in old.keys() | new.keys() if old.get(key) != new.get(key)}
    return bool(changed) and all(str(key).startswith(ENTRY) for key in changed)


def _annotations(obj: dict[str, Any]) -> dict[Any, Any]:
    meta = obj.get("metadata")
    found = meta.get("annotations") if isinstance(meta, dict) else None
    return found if isinstance(found, dict) else {}


def successor(notes: dict[str, str], lease: str, identity: str) -> str | None:
    """The candidate of ``lease`` that joined last, other than ``identity``; None if none."""
    others = [who for _, who, _ in entries(notes, lease) if who != identity]
    return others[-1] if others else None


def room(
    notes: dict[str, str], lease: str, holder: str | None, identity: str, now: dt.datetime
) -> bool:
    """Whether ``identity`` may join: fewer than ``SEATS`` others than it and ``holder``
    joined within ``SEAT_TTL`` of ``now`` (a clock ahead of a joiner's only ages sooner)."""
    since = now - dt.timedelta(seconds=SEAT_TTL)
    seated = [who for when, who, _ in entries(notes, lease) if when > since]
    return sum(who not in (holder, identity) for who in seated) < SEATS


def stale(notes: dict[str, str], lease: str, identity: str) -> dict[str, str | None]:
    """Removals (a merge patch's nulls) that leave room for ``identity`` among ``KEEP`` entries."""
    others = [key for _, who, key in entries(notes, lease) if who != identity]
    return dict.fromkeys(others[: max(0, len(others) - KEEP + 1)])


def present(objects: Iterable[dict[str, Any]]) -> dict[str, int | None]:
    """Name -> lease duration (None when unusable) of each Lease of one complete list but
    this object: every one of them may be an election's, led by a sidecar or a peer."""
    found = {}
    for record in map(LeaseRecord.from_object, objects):
        if record.name and record.name != NAME:
            found[record.name] = record.lease_duration
    return found


def settled(obj: dict[str, Any], now: dt.datetime, duration: float) -> bool:
    """Whether the coordination Lease ``obj`` was created more than ``duration`` before
    ``now`` (the API server's clock): only then does a missing mark prove that no Lease of
    the election was deleted while its holder could still vouch for its term."""
    meta = obj.get("metadata")
    created = parse_time(meta.get("creationTimestamp")) if isinstance(meta, dict) else None
    # creationTimestamp is truncated to the second: the creation may be a second later.
    return created is not None and now - created > dt.timedelta(seconds=duration + 1)


def duty(notes: dict[str, str]) -> tuple[str, dt.datetime | None]:
    """(holder, until) of the sweep duty; ("", None) when nobody holds it."""
    item = read_value(notes.get(DUTY, ""))
    holder = item.get("holder")
    return (holder, parse_time(item.get("until"))) if isinstance(holder, str) else ("", None)


def duty_value(holder: str, until: dt.datetime | None) -> dict[str, str]:
    return {DUTY: _value(holder=holder, until=format_microtime(until) if until else "")}
