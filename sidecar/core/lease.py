"""The Lease record: its name, its fields, and the objects we write.

Compatible with grelmicro's Kubernetes backend: election ``main`` is Lease
``leader-main`` labelled ``app.kubernetes.io/managed-by: grelmicro``.

Reading is tolerant: a Lease edited by hand or written by another tool may have
missing, null or garbage fields. ``LeaseRecord.from_object`` never raises; it
records what it could not use in ``problems`` and the election treats an
unusable field conservatively (see ``election``). Writing always starts from the
object as read, so labels and annotations others put there are kept.
"""

from __future__ import annotations

import copy
import datetime as dt
import re
from dataclasses import dataclass, field
from typing import Any

from .defaults import MAX_DURATION

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "grelmicro"
LEASE_PREFIX = "leader-"
API_VERSION = "coordination.k8s.io/v1"
#: On a release that names a successor: who released (contract §2, hand-off).
HANDOFF_ANNOTATION = "leader-election.grelmicro.io/handoff-from"


def lease_name(election: str) -> str:
    """``leader-<election>`` after sanitising; ValueError when nothing usable is left."""
    name = re.sub(r"[^a-z0-9-]", "-", election.lower())
    name = re.sub(r"-+", "-", name).strip("-")
    if not name:
        raise ValueError(
            f"election name {election!r} has no letters or digits; use e.g. 'main' or 'my-app'"
        )
    full = re.sub(r"-+", "-", f"{LEASE_PREFIX}{name}")
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
    if parsed.tzinfo is None:
        return None
    return parsed.astimezone(dt.UTC)


def version_number(resource_version: str) -> int | None:
    """A resourceVersion as the integer it is, or None when it is not a canonical positive one.

    The API server gives every write a resourceVersion from one counter that
    only grows (etcd's revision; comparable as integers for objects of one
    resource since Kubernetes 1.35, KEP-5504). The election uses this to drop
    late watch events and to make fencing tokens (contract §2).
    """
    if resource_version.isdigit() and not resource_version.startswith("0"):
        return int(resource_version)
    return None


@dataclass(frozen=True)
class LeaseRecord:
    """What the election needs from a Lease object, read tolerantly."""

    name: str
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
        meta_raw = obj.get("metadata")
        meta: dict[str, Any] = meta_raw if isinstance(meta_raw, dict) else {}
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            if spec is not None:
                problems.append(f"spec is not an object: {spec!r:.60}")
            spec = {}

        holder = spec.get("holderIdentity")
        if holder is not None and not isinstance(holder, str):
            problems.append(f"holderIdentity is not a string: {holder!r:.60}")
            holder = None
        holder = holder or None

        duration = spec.get("leaseDurationSeconds")
        if duration is not None and (
            not isinstance(duration, int)
            or isinstance(duration, bool)
            or not 1 <= duration <= MAX_DURATION
        ):
            problems.append(f"leaseDurationSeconds {duration!r:.30} is outside 1..{MAX_DURATION}")
            duration = None

        times: dict[str, dt.datetime | None] = {}
        for key in ("acquireTime", "renewTime"):
            raw = spec.get(key)
            times[key] = parse_time(raw)
            if raw is not None and times[key] is None:
                problems.append(f"{key} {raw!r:.40} is not an RFC 3339 time")

        transitions = spec.get("leaseTransitions", 0)
        if transitions is None:
            transitions = 0
        if not isinstance(transitions, int) or isinstance(transitions, bool) or transitions < 0:
            problems.append(f"leaseTransitions {transitions!r:.30} is not a non-negative integer")
            transitions = 0

        labels_raw = meta.get("labels")
        labels: dict[str, Any] = labels_raw if isinstance(labels_raw, dict) else {}
        annotations = meta.get("annotations")
        handoff = annotations.get(HANDOFF_ANNOTATION) if isinstance(annotations, dict) else None
        return cls(
            name=str(meta.get("name", "")),
            resource_version=str(meta.get("resourceVersion", "")),
            holder=holder,
            lease_duration=duration,
            acquire_time=times["acquireTime"],
            renew_time=times["renewTime"],
            transitions=transitions,
            labels={str(k): str(v) for k, v in labels.items()},
            handoff_from=handoff if isinstance(handoff, str) and handoff else None,
            problems=tuple(problems),
            raw=obj,
        )

    @property
    def managed(self) -> bool:
        return self.labels.get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE

    def same_content(self, other: LeaseRecord | None) -> bool:
        """Whether ``other`` is the same record for expiry purposes (client-go compares the record, not the resourceVersion)."""
        return other is not None and (
            self.holder,
            self.lease_duration,
            self.acquire_time,
            self.renew_time,
            self.transitions,
        ) == (
            other.holder,
            other.lease_duration,
            other.acquire_time,
            other.renew_time,
            other.transitions,
        )

    def wall_expiry(self) -> dt.datetime | None:
        """``renewTime + leaseDurationSeconds``; only for cleanup and display, never for takeover."""
        if self.renew_time is None or self.lease_duration is None:
            return None
        return self.renew_time + dt.timedelta(seconds=self.lease_duration)


def lease_object(
    name: str,
    namespace: str,
    labels: dict[str, str],
    *,
    annotations: dict[str, str] | None = None,
    spec: dict[str, Any] | None = None,
    resource_version: str | None = None,
) -> dict[str, Any]:
    """A Lease object to write: every Lease this project creates or replaces is built here."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels)}
    if annotations:
        meta["annotations"] = dict(annotations)
    if resource_version is not None:
        meta["resourceVersion"] = resource_version
    return {"apiVersion": API_VERSION, "kind": "Lease", "metadata": meta, "spec": spec or {}}


def new_lease(name: str, namespace: str) -> dict[str, Any]:
    """An election's Lease, before its first claim."""
    return lease_object(name, namespace, {MANAGED_BY_LABEL: MANAGED_BY_VALUE})


def _base(record: LeaseRecord | None, name: str, namespace: str) -> dict[str, Any]:
    if record is None:
        return new_lease(name, namespace)
    obj = copy.deepcopy(record.raw)
    obj.setdefault("apiVersion", API_VERSION)
    obj.setdefault("kind", "Lease")
    meta = obj.setdefault("metadata", {})
    if not isinstance(meta.get("labels"), dict):
        meta["labels"] = {}
    meta["labels"][MANAGED_BY_LABEL] = MANAGED_BY_VALUE
    meta["resourceVersion"] = record.resource_version
    annotations = meta.get("annotations")
    if isinstance(annotations, dict):
        annotations.pop(HANDOFF_ANNOTATION, None)  # it marks one release, never a claim
    if not isinstance(obj.get("spec"), dict):
        obj["spec"] = {}
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
    """The object that makes ``identity`` the holder.

    ``acquire``: a new leadership term (we were not leading), so
    ``leaseTransitions`` moves on even when the record already names us (it
    counts terms, as Kubernetes means it). A renew keeps it.
    """
    obj = _base(record, name, namespace)
    spec = obj["spec"]
    stamp = format_microtime(now)
    holding = record is not None and record.holder == identity and not acquire
    spec["holderIdentity"] = identity
    spec["leaseDurationSeconds"] = lease_duration
    spec["renewTime"] = stamp
    if record is None:
        spec["acquireTime"] = stamp
        spec["leaseTransitions"] = 0
    elif holding:
        acquired = record.acquire_time
        spec["acquireTime"] = format_microtime(acquired) if acquired else stamp
        spec["leaseTransitions"] = record.transitions
    else:
        # Any new term (a change of holder, from a released, empty holder too,
        # or our own re-acquisition) counts as a transition.
        spec["acquireTime"] = stamp
        spec["leaseTransitions"] = record.transitions + 1
    return obj


def vacate(
    record: LeaseRecord, *, now: dt.datetime, successor: str | None = None
) -> dict[str, Any]:
    """The graceful release of contract §2: 1 s duration, transitions kept.

    Without ``successor`` the holder is emptied and any follower may claim at
    once. With one, the Lease names it as holder and carries the hand-off
    marker: the successor may claim at once, everyone else waits out the 1 s
    (so a handover among many costs one claim instead of a burst of 409s, and
    a dead successor delays it by one second at most).
    """
    obj = _base(record, record.name, str(record.raw.get("metadata", {}).get("namespace", "")))
    spec = obj["spec"]
    spec["holderIdentity"] = successor or ""
    spec["leaseDurationSeconds"] = 1
    spec["renewTime"] = format_microtime(now)
    spec["leaseTransitions"] = record.transitions
    if successor:
        meta = obj["metadata"]
        if not isinstance(meta.get("annotations"), dict):
            meta["annotations"] = {}
        meta["annotations"][HANDOFF_ANNOTATION] = record.holder or ""
    return obj
