"""The Lease record (contract §2, grelmicro's): its name, its fields, and the objects we write.

Reading is tolerant: ``LeaseRecord.from_object`` never raises on a Lease edited
by hand or written by another tool; it lists what it could not use in
``problems``, and the election treats such a field conservatively. Writing
starts from the object as read, so labels and annotations others put there stay.
"""

from __future__ import annotations

import copy
import datetime as dt
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from .defaults import MAX_DURATION

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "grelmicro"
LEASE_PREFIX = "leader-"
API_VERSION = "coordination.k8s.io/v1"
#: On a release that names a successor: who released (contract §2, hand-off).
HANDOFF_ANNOTATION = "leader-election.grelmicro.io/handoff-from"
#: A request to the holder to hand over (contract §2, transfer): for one term, so the claim
#: that begins the next term and every release drop it.
TRANSFER_ANNOTATION = "leader-election.grelmicro.io/transfer"


def lease_name(election: str) -> str:
    """``leader-<election>`` after sanitising; ValueError when nothing usable is left."""
    name = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", election.lower())).strip("-")
    if not name:
        raise ValueError(
            f"election name {election!r} has no letters or digits; use e.g. 'main' or 'my-app'"
        )
    full = LEASE_PREFIX + name  # name has no leading "-", so no run of two
    if len(full) > 253:
        raise ValueError(
            f"election name {election!r} is too long: the Lease name must be ≤ 253 chars"
        )
    return full


def election_of(lease: str) -> str:
    return lease[len(LEASE_PREFIX) :] if lease.startswith(LEASE_PREFIX) else lease


def format_microtime(when: dt.datetime) -> str:
    """MicroTime as the API server writes it: UTC, microseconds, ``Z``."""
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: Any) -> dt.datetime | None:
    """RFC 3339 (with or without fraction); None for anything else."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    return parsed.astimezone(dt.UTC) if parsed.tzinfo is not None else None


def version_number(resource_version: str) -> int | None:
    """A resourceVersion as the integer it is (one counter that only grows, contract §2,
    fencing token), or None when it is not a canonical positive one."""
    if re.fullmatch("[1-9][0-9]*", resource_version):  # ASCII: int() refuses some digits
        return int(resource_version)
    return None


#: The fields that make a record the same claim, whatever its resourceVersion.
_CONTENT = ("holder", "lease_duration", "acquire_time", "renew_time", "transitions")


def uid_of(obj: dict[str, Any]) -> str:
    """The object's uid ("" when absent): a Lease deleted and created again is another."""
    return str(_dict(obj.get("metadata")).get("uid") or "")


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def valid_duration(value: Any) -> int | None:
    """``leaseDurationSeconds`` as a claim is judged by: None when it is not 1..MAX_DURATION."""
    return value if _is_int(value) and 1 <= value <= MAX_DURATION else None


@dataclass(frozen=True)
class LeaseRecord:
    """What the election needs from a Lease object, read tolerantly."""

    name: str
    namespace: str
    resource_version: str
    holder: str | None
    lease_duration: int | None
    acquire_time: dt.datetime | None
    renew_time: dt.datetime | None
    transitions: int
    labels: dict[str, str] = field(default_factory=dict)
    #: Who released this Lease to ``holder`` (a hand-off), when it is one.
    handoff_from: str | None = None
    problems: tuple[str, ...] = ()
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_object(cls, obj: dict[str, Any]) -> LeaseRecord:
        problems: list[str] = []
        meta, spec = _dict(obj.get("metadata")), obj.get("spec")
        if spec is not None and not isinstance(spec, dict):
            problems.append(f"spec is not an object: {spec!r:.60}")
        spec = _dict(spec)
        holder = spec.get("holderIdentity")
        if holder is not None and not isinstance(holder, str):
            problems.append(f"holderIdentity is not a string: {holder!r:.60}")
            holder = None
        duration = spec.get("leaseDurationSeconds")
        if duration is not None and valid_duration(duration) is None:
            problems.append(f"leaseDurationSeconds {duration!r:.30} is outside 1..{MAX_DURATION}")
            duration = None
        times = {key: parse_time(spec.get(key)) for key in ("acquireTime", "renewTime")}
        for key, when in times.items():
            if when is None and spec.get(key) is not None:
                problems.append(f"{key} {spec[key]!r:.40} is not an RFC 3339 time")
        transitions = spec.get("leaseTransitions")
        if transitions is not None and not (_is_int(transitions) and transitions >= 0):
            problems.append(f"leaseTransitions {transitions!r:.30} is not a non-negative integer")
            transitions = None
        handoff = _dict(meta.get("annotations")).get(HANDOFF_ANNOTATION)
        return cls(
            name=str(meta.get("name", "")),
            namespace=str(meta.get("namespace", "")),
            resource_version=str(meta.get("resourceVersion", "")),
            holder=holder or None,
            lease_duration=duration,
            acquire_time=times["acquireTime"],
            renew_time=times["renewTime"],
            transitions=transitions or 0,
            labels={str(k): str(v) for k, v in _dict(meta.get("labels")).items()},
            handoff_from=handoff if isinstance(handoff, str) and handoff else None,
            problems=tuple(problems),
            raw=obj,
        )

    @property
    def uid(self) -> str:
        return uid_of(self.raw)

    @property
    def managed(self) -> bool:
        return self.labels.get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE

    def same_content(self, other: LeaseRecord | None) -> bool:
        """Whether ``other`` is the same record for expiry purposes (client-go compares the record, not the resourceVersion)."""
        return other is not None and all(getattr(self, f) == getattr(other, f) for f in _CONTENT)

    def wall_expiry(self) -> dt.datetime | None:
        """``renewTime + leaseDurationSeconds``; only for cleanup and display, never for takeover."""
        if self.renew_time is None or self.lease_duration is None:
            return None
        return self.renew_time + dt.timedelta(seconds=self.lease_duration)


def lease_object(
    name: str, namespace: str, labels: dict[str, str], *, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """A new Lease object to write: every Lease this project creates is built here."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels)}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"apiVersion": API_VERSION, "kind": "Lease", "metadata": meta, "spec": {}}


def _base(record: LeaseRecord | None, name: str, namespace: str) -> dict[str, Any]:
    """The object to write: the Lease as read (what others put there kept), or a new one."""
    if record is None:
        return lease_object(name, namespace, {MANAGED_BY_LABEL: MANAGED_BY_VALUE})
    obj = copy.deepcopy(record.raw)
    obj.setdefault("apiVersion", API_VERSION)
    obj.setdefault("kind", "Lease")
    meta = obj.setdefault("metadata", {})
    meta["labels"] = {**_dict(meta.get("labels")), MANAGED_BY_LABEL: MANAGED_BY_VALUE}
    meta["resourceVersion"] = record.resource_version
    if isinstance(meta.get("annotations"), dict):
        meta["annotations"].pop(HANDOFF_ANNOTATION, None)  # it marks one release, never a claim
    obj["spec"] = _dict(obj.get("spec"))
    return obj


def claim(
    record: LeaseRecord | None,
    *,
    name: str,
    namespace: str,
    identity: str,
    lease_duration: int,
    now: dt.datetime,
    acquire: bool = True,
) -> dict[str, Any]:
    """The object that makes ``identity`` the holder. ``acquire``: a new term (we were not
    leading), so ``leaseTransitions`` moves on even when the record names us already (it counts
    terms, contract §2); a renew keeps it."""
    obj, stamp = _base(record, name, namespace), format_microtime(now)
    renew = record is not None and record.holder == identity and not acquire
    acquired = record.acquire_time if record is not None and renew else None
    if not renew:
        _dict(obj["metadata"].get("annotations")).pop(TRANSFER_ANNOTATION, None)
    obj["spec"].update(
        holderIdentity=identity,
        leaseDurationSeconds=lease_duration,
        renewTime=stamp,
        acquireTime=format_microtime(acquired) if acquired else stamp,
        leaseTransitions=0 if record is None else record.transitions + (0 if renew else 1),
    )
    return obj


def vacate(
    record: LeaseRecord,
    *,
    now: dt.datetime,
    successor: str | None = None,
    without: Collection[str] = (),
) -> dict[str, Any]:
    """The graceful release of contract §2: 1 s duration, transitions kept; the holder
    emptied, or, with ``successor``, named, with the hand-off marker saying who released;
    the annotations named in ``without`` left out."""
    obj = _base(record, record.name, record.namespace)
    for key in (*without, TRANSFER_ANNOTATION):
        _dict(obj["metadata"].get("annotations")).pop(key, None)
    spec = {"holderIdentity": successor or "", "leaseDurationSeconds": 1}
    obj["spec"].update(spec, renewTime=format_microtime(now), leaseTransitions=record.transitions)
    if successor:
        meta = obj["metadata"]
        meta["annotations"] = notes = _dict(meta.get("annotations"))
        notes[HANDOFF_ANNOTATION] = record.holder or ""
    return obj
