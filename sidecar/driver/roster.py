"""Who a releasing leader may hand its Lease to: the election's roster of candidates (contract §2).

When a leader releases with nobody named, every follower sees the emptied
Lease through its watch at the same instant and claims it: at 50 candidates,
one write wins and 49 get a 409 and re-read, for every handover. A release
that names one successor (``lease.vacate(successor=)``) costs one claim. To
name one, the leader must know who is there, and followers make no requests
while they follow; so each candidate writes its name once, when it starts,
into a small Lease next to the election's (``leader-main.candidates``), and
takes it out when it stops gracefully. The leader reads that one object when
it releases and names the candidate that joined last: during a rolling update
that is a pod of the new revision, which the rollout will not stop next.

The roster decides nothing about safety. A name it holds may be stale (a pod
that was killed, not stopped): named, it costs the handover one second (the
hand-off's lease duration), after which every follower may claim as before,
and the new leader takes that name out. Each entry is its own annotation,
written by a merge patch without a resourceVersion, so candidates joining at
once never conflict. The object is labelled ``managed-by: grelmicro-sidecar``
(not ``grelmicro``), so sweeps, ``status`` and grelmicro peers never see it.
"""

from __future__ import annotations

import binascii
import contextlib
import datetime as dt
import json
from collections.abc import Callable
from typing import Any

from ..core.lease import API_VERSION, format_microtime, parse_time
from ..kube.errors import Conflict, NotFound
from ..kube.leases import LeaseStore

SUFFIX = ".candidates"
#: Entries are annotations under this prefix, one per candidate, keyed by a checksum of its identity.
ENTRY_PREFIX = "candidates.leader-election.grelmicro.io/"
LABELS = {
    "app.kubernetes.io/managed-by": "grelmicro-sidecar",
    "app.kubernetes.io/component": "candidates",
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

    CRC-32, not a cryptographic hash: ``hashlib`` would load 0.8 MB into every
    sidecar, and two identities sharing a key cost nothing unsafe (one entry
    hides the other, so that candidate is not named and claims like any
    follower). The entry's value holds the identity itself.
    """
    return f"{ENTRY_PREFIX}{binascii.crc32(identity.encode()):08x}"


def _metadata_map(obj: dict[str, Any] | None, key: str) -> dict[Any, Any]:
    meta = (obj or {}).get("metadata")
    found = meta.get(key) if isinstance(meta, dict) else None
    return found if isinstance(found, dict) else {}


def entries(obj: dict[str, Any] | None) -> list[tuple[dt.datetime, str]]:
    """(joined at, identity) of every readable entry of a roster object, oldest first.

    Tolerant like ``LeaseRecord``: an entry someone edited into garbage is skipped.
    """
    annotations = _metadata_map(obj, "annotations")
    found = []
    for key, value in annotations.items():
        if not (isinstance(key, str) and key.startswith(ENTRY_PREFIX) and isinstance(value, str)):
            continue
        try:
            entry = json.loads(value)
        except ValueError:
            continue
        if not isinstance(entry, dict):
            continue
        identity, joined = entry.get("identity"), parse_time(entry.get("joined"))
        if isinstance(identity, str) and identity and joined is not None:
            found.append((joined, identity))
    return sorted(found)


class Roster:
    """This candidate's entry in its election's roster, and the leader's pick from it."""

    def __init__(
        self,
        store: LeaseStore,
        lease: str,
        namespace: str,
        identity: str,
        now: Callable[[], dt.datetime],
    ):
        self.store = store
        self.name = roster_name(lease)
        self.namespace = namespace
        self.identity = identity
        self.now = now
        self.joined = False

    def _entries_patch(self, values: dict[str, str | None]) -> dict[str, Any]:
        return {"metadata": {"annotations": values}}

    async def join(self, timeout: float | None = None) -> None:
        """Add this candidate (creating the roster when it is the first); raises ``errors`` classes."""
        if self.name is None:
            return
        value = json.dumps(
            {"identity": self.identity, "joined": format_microtime(self.now())},
            separators=(",", ":"),
        )
        patch = self._entries_patch({entry_key(self.identity): value})
        for _ in range(3):
            try:
                await self.store.patch(self.name, patch, timeout=timeout)
                self.joined = True
                return
            except NotFound:
                pass
            body = {
                "apiVersion": API_VERSION,
                "kind": "Lease",
                "metadata": {
                    "name": self.name,
                    "namespace": self.namespace,
                    "labels": dict(LABELS),
                    **patch["metadata"],
                },
                "spec": {},
            }
            try:
                await self.store.create(body, timeout=timeout)
                self.joined = True
                return
            except Conflict:
                continue  # another candidate created it first: patch it

    async def leave(self, timeout: float | None = None) -> None:
        """Take this candidate out (graceful exit); a missing roster is fine."""
        if self.joined:
            await self.forget(self.identity, timeout)
            self.joined = False

    async def forget(self, identity: str, timeout: float | None = None) -> None:
        """Take ``identity`` out: it left, or was named and did not take the Lease."""
        if self.name is None:
            return
        with contextlib.suppress(NotFound):
            await self.store.patch(
                self.name, self._entries_patch({entry_key(identity): None}), timeout=timeout
            )

    async def successor(self, timeout: float | None = None) -> str | None:
        """The candidate that joined last, other than this one; None when there is none."""
        if self.name is None:
            return None
        obj = await self.store.get(self.name, timeout=timeout)
        labels = _metadata_map(obj, "labels")
        if labels.get("app.kubernetes.io/component") != LABELS["app.kubernetes.io/component"]:
            return None  # not a roster we wrote: name nobody
        others = [identity for _, identity in entries(obj) if identity != self.identity]
        return others[-1] if others else None
