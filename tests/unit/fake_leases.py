"""An in-memory, optimistic Lease store with the ``LeaseStore`` interface, for the driver in-process.

Behaves like the API server where the driver can tell, as the conformance
suite (``lease_conformance``) checks against the real one: resourceVersions go
up with every write (and are checked on replace, on a merge patch that names
one and on preconditioned delete, 409 otherwise; a replace that names none, or
a patch that names a null one, is a 422), a write that changes nothing stores nothing (same version, no event),
a create of an existing Lease is a 409, a create gives a new uid, a replace
naming another uid is a 409, of a missing Lease too (without a uid it creates
it, as Leases allow), a watch replays what happened after the version it
starts from (a delete under the delete's own version; from none, the Lease as it is first) and ends after its
timeout, a create stamps ``creationTimestamp`` (``EPOCH`` plus the loop's
time, to the second, as the tests' wall clocks run), annotations past the API server's cap are a 422, and a version older than the compaction point is 410.
``down = True`` makes every call fail as an unreachable server would.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import itertools
from collections.abc import AsyncIterator, Callable
from typing import Any

from sidecar.kube.errors import ApiError, ApiUnavailable, Conflict, Gone, NotFound

#: The wall time at the loop's time 0 (the tests' clocks: ``LoopClock``).
EPOCH = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
#: The API server's cap on an object's annotations, keys and values together (bytes).
ANNOTATIONS_LIMIT = 256 * 1024


class FakeLeases:
    def __init__(self, namespace: str = "ns") -> None:
        self.namespace = namespace
        self.request_timeout = 2.0
        self.clock_offset = None  # no Date headers here
        self.objects: dict[str, dict[str, Any]] = {}
        self.history: list[tuple[int, str, dict[str, Any]]] = []  # (rv, type, object)
        self.rv = 100
        self.compacted = 0  # watches from a version below this get 410
        self.down = False
        #: Virtual seconds each write takes to reach the store (a request's round trip):
        #: writers woken together then race as they do against a real API server
        self.latency = 0.0
        #: Virtual seconds between applying a write and answering it: a caller
        #: cancelled in that time never learns that its write happened (a lost answer)
        self.answer_latency = 0.0
        #: Virtual seconds between applying a write and its event reaching the watches
        #: (a busy API server or a slow network): a writer may have its answer before its
        #: own event, or, with ``answer_latency``, neither
        self.watch_latency = 0.0
        self._visible_at: dict[int, float] = {}  # resourceVersion -> when watches may see it
        #: (verb, holderIdentity) of writes to election Leases (labelled managed-by
        #: grelmicro), a write that changes nothing included (it was sent); the
        #: namespace's coordination Lease's (roster, marks, sweep duty) to ``roster_writes``
        self.writes: list[tuple[str, str]] = []
        self.roster_writes: list[tuple[str, str]] = []
        #: Writes refused with 409 (every Lease; merge patches that name a resourceVersion
        #: are counted in ``patch_conflicts`` instead)
        self.conflicts = 0
        self.patch_conflicts = 0
        self.lists = 0
        #: Names read one by one (``get``), in order
        self.gets: list[str] = []
        self.label_lists = 0  # lists by label (the sweep's), not the election's by name
        self._generation = 0
        #: Set, and replaced by a new one, on every change: a watch takes the one current
        #: before it looks at the history, so a change while it yields is not missed. (A
        #: Condition's lock left watches stuck when many were cancelled at once.)
        self._changed = asyncio.Event()
        self._uids = itertools.count(1)

    # ---- the LeaseStore interface -----------------------------------------
    async def _travel(self) -> None:
        if self.latency:
            await asyncio.sleep(self.latency)

    async def _answer(self) -> None:
        if self.answer_latency:
            await asyncio.sleep(self.answer_latency)

    def _check(self, verb: str) -> None:
        if self.down:
            raise ApiUnavailable(f"{verb} leases: cannot connect", verb=verb)

    async def _record(self, kind: str, obj: dict[str, Any]) -> None:
        self.history.append((self.rv, kind, copy.deepcopy(obj)))
        self._visible_at[self.rv] = asyncio.get_running_loop().time() + self.watch_latency
        self._notify()

    def _stamp(
        self, body: dict[str, Any], current: dict[str, Any] | None = None, verb: str = "update"
    ) -> dict[str, Any]:
        """``body`` as stored over ``current`` (None: created): the uid kept (a new one on a
        create), a new resourceVersion, unless nothing changed: then ``current`` itself."""
        notes = body["metadata"].get("annotations") or {}
        if sum(len(k.encode()) + len(v.encode()) for k, v in notes.items()) > ANNOTATIONS_LIMIT:
            message = f"{verb} leases: HTTP 422: metadata.annotations: Too long"
            raise ApiError(message, status=422, verb=verb)
        obj = copy.deepcopy(body)
        meta = obj["metadata"]
        meta.setdefault("namespace", self.namespace)
        meta["uid"] = current["metadata"]["uid"] if current else f"uid-{next(self._uids)}"
        if current is None:
            when = EPOCH + dt.timedelta(seconds=int(asyncio.get_running_loop().time()))
            meta["creationTimestamp"] = when.strftime("%Y-%m-%dT%H:%M:%SZ")
        if current is not None:
            meta["resourceVersion"] = current["metadata"]["resourceVersion"]
            if obj == current:
                return current
        self.rv += 1
        meta["resourceVersion"] = str(self.rv)
        return obj

    @staticmethod
    def _unversioned(verb: str) -> ApiError:
        """A write over no resourceVersion: Leases are never updated blindly."""
        message = f"{verb} leases: HTTP 422: metadata.resourceVersion: must be specified"
        return ApiError(message, status=422, verb=verb)

    def _wrote(self, verb: str, obj: dict[str, Any]) -> None:
        labels = obj["metadata"].get("labels") or {}
        managed = labels.get("app.kubernetes.io/managed-by") == "grelmicro"
        writes = self.writes if managed else self.roster_writes
        writes.append((verb, obj["spec"].get("holderIdentity", "")))

    async def get(
        self, name: str, timeout: float | None = None, cached: bool = False
    ) -> dict[str, Any] | None:
        """``cached`` reads are answered from the store too (this one has no cache to lag)."""
        self._check("get")
        self.gets.append(name)
        obj = self.objects.get(name)
        return copy.deepcopy(obj) if obj is not None else None

    async def list(
        self, label_selector: str = "", field_selector: str = "", timeout: float | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        self._check("list")
        self.lists += 1
        self.label_lists += bool(label_selector)
        items = list(self.objects.values())
        if field_selector.startswith("metadata.name="):
            items = [o for o in items if o["metadata"]["name"] == field_selector.split("=", 1)[1]]
        if label_selector:
            key, value = label_selector.split("=", 1)
            items = [o for o in items if (o["metadata"].get("labels") or {}).get(key) == value]
        return copy.deepcopy(items), str(self.rv)

    async def create(self, body: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        await self._travel()
        self._check("create")
        name = body["metadata"]["name"]
        if name in self.objects:
            self.conflicts += 1
            raise Conflict("create leases: HTTP 409", status=409, verb="create")
        obj = self._stamp(body, verb="create")
        self.objects[name] = obj
        self._wrote("create", obj)
        await self._record("ADDED", obj)
        return copy.deepcopy(obj)

    async def _store(self, verb: str, obj: dict[str, Any], current: dict[str, Any]) -> None:
        """Keep ``obj`` written over ``current``: an event, unless nothing changed."""
        self._wrote(verb, obj)
        if obj is not current:
            self.objects[obj["metadata"]["name"]] = obj
            await self._record("MODIFIED", obj)

    async def replace(self, body: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        await self._travel()
        self._check("update")
        meta = body["metadata"]
        current = self.objects.get(meta["name"])
        if current is None and not meta.get("uid"):  # Leases allow a create by update
            obj = self.objects[meta["name"]] = self._stamp(body)
            self._wrote("update", obj)
            await self._record("ADDED", obj)
            await self._answer()
            return copy.deepcopy(obj)
        if current is not None and not meta.get("resourceVersion"):
            raise self._unversioned("update")
        if (
            current is None
            or meta["resourceVersion"] != current["metadata"]["resourceVersion"]
            or meta.get("uid", current["metadata"]["uid"]) != current["metadata"]["uid"]
        ):  # someone wrote since, or it is another Lease of the name: the uid read is gone
            self.conflicts += 1
            raise Conflict("update leases: HTTP 409", status=409, verb="update")
        obj = self._stamp(body, current)
        await self._store("update", obj, current)
        await self._answer()
        return copy.deepcopy(obj)

    async def patch(
        self, name: str, body: dict[str, Any], timeout: float | None = None
    ) -> dict[str, Any]:
        """A JSON merge patch (RFC 7386) of whatever is there; one that names a
        resourceVersion applies only over it (409 otherwise), as the API server's does."""
        self._check("patch")
        current = self.objects.get(name)
        if current is None:
            raise NotFound("patch leases: HTTP 404", status=404, verb="patch")
        meta = body.get("metadata", {})
        wanted = meta.get("resourceVersion")
        if "resourceVersion" in meta and not wanted:  # the patch removes it: no version to go over
            raise self._unversioned("patch")
        if wanted and wanted != current["metadata"]["resourceVersion"]:
            self.patch_conflicts += 1
            raise Conflict("patch leases: HTTP 409", status=409, verb="patch")
        obj = self._stamp(merge_patch(current, body), current, verb="patch")
        await self._store("patch", obj, current)
        return copy.deepcopy(obj)

    async def delete(
        self, name: str, resource_version: str, *, namespace: str | None = None
    ) -> None:
        """The watches see the Lease's last state under the delete's own resourceVersion."""
        self._check("delete")
        current = self.objects.get(name) if namespace in (None, self.namespace) else None
        if current is None:
            raise NotFound("delete leases: HTTP 404", status=404, verb="delete")
        if current["metadata"]["resourceVersion"] != resource_version:
            raise Conflict("delete leases: HTTP 409", status=409, verb="delete")
        del self.objects[name]
        self.rv += 1
        gone = copy.deepcopy(current)
        gone["metadata"]["resourceVersion"] = str(self.rv)
        await self._record("DELETED", gone)

    async def watch(
        self, name: str, resource_version: str, timeout_seconds: int, label_selector: str = ""
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """As the API server's (``name`` ``""``: every Lease): with ``label_selector``
        (``key=value`` only), a write is told
        only if the Lease matches before or after it: ADDED when it starts to match,
        MODIFIED while it does, DELETED (the content before, the new version) when a write
        or a deletion ends the match."""
        self._check("watch")
        matches = _selector(label_selector)
        if not resource_version:  # the most recent: the Lease as it is, then what follows
            since = self.rv
            for current in [o for n, o in self.objects.items() if n == name or not name]:
                if matches(current):
                    yield "ADDED", copy.deepcopy(current)
        else:
            since = int(resource_version)
        if since < self.compacted:
            raise Gone("watch leases: HTTP 410", status=410, verb="watch")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_seconds
        generation = self._generation
        while True:
            changed = self._changed
            held = None  # when the first event not yet delivered becomes visible
            before: dict[str, dict[str, Any] | None] = {}  # each Lease before the write looked at
            for rv, kind, obj in list(self.history):
                if name and obj["metadata"]["name"] != name:
                    continue
                key = obj["metadata"]["name"]
                if rv > since:
                    visible_at = self._visible_at.get(rv, 0.0)
                    if visible_at > loop.time():
                        held = visible_at  # in order: nothing after it is delivered first
                        break
                    since = rv
                    told = _told(kind, before.get(key), obj, matches)
                    if told is not None:
                        yield told[0], copy.deepcopy(told[1])
                before[key] = None if kind == "DELETED" else obj
            now = loop.time()
            left = deadline - now
            if left <= 0 or self.down or generation != self._generation:
                return
            # At least a millisecond: the virtual clock would not move for less, and the
            # loop would spin on an event due a hair after now (a latency like 1.1 s).
            wait = max(0.001, left if held is None else min(left, held - now))
            try:
                await asyncio.wait_for(changed.wait(), wait)
            except TimeoutError:
                if held is None or held - now >= left:
                    return

    def close(self) -> None:
        pass

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    # ---- for tests ----------------------------------------------------------
    async def compact(self) -> None:
        """Forget history (as etcd compaction does): open watches end, and resuming from any
        version seen so far is 410 Gone."""
        self.rv += 1  # reads from now on see a version at the compaction point
        self.compacted = self.rv
        self.history.clear()
        self._visible_at.clear()
        self._generation += 1
        self._notify()

    def holder(self, name: str) -> str | None:
        obj = self.objects.get(name)
        return (obj["spec"].get("holderIdentity") or None) if obj is not None else None


def _selector(selector: str) -> Callable[[dict[str, Any]], bool]:
    """``key=value`` (or nothing: everything), as the fake's watch understands it."""
    if not selector:
        return lambda obj: True
    key, sep, value = selector.partition("=")
    if not sep or "," in selector or "!" in key:
        raise ValueError(f"the fake store's watch takes key=value selectors only: {selector!r}")
    return lambda obj: ((obj.get("metadata") or {}).get("labels") or {}).get(key) == value


def _told(
    kind: str,
    before: dict[str, Any] | None,
    after: dict[str, Any],
    matches: Callable[[dict[str, Any]], bool],
) -> tuple[str, dict[str, Any]] | None:
    """What a watch with ``matches`` is told of one write (None: nothing)."""
    if kind == "DELETED":
        return (kind, after) if matches(after) else None
    if matches(after):
        return ("MODIFIED" if before is not None and matches(before) else "ADDED"), after
    if before is not None and matches(before):
        version = after["metadata"]["resourceVersion"]
        return "DELETED", {**before, "metadata": {**before["metadata"], "resourceVersion": version}}
    return None


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, ``None`` removes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out
