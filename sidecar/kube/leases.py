"""The Lease store: Lease operations in one namespace, as dicts and ``errors`` classes.

Every write but a merge patch is optimistic (the body carries the ``resourceVersion``
it was built from): a 409 is ``Conflict``, "someone else won" (contract §2).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from .api import COORDINATION, KubeApi, path
from .config import ApiConfig
from .errors import NotFound, error_for
from .skew import ClockOffset

Obj = dict[str, Any]


class LeaseStore:
    """Lease operations in one namespace; with ``""``, lists of every namespace (``status -A``,
    the injector's sweep), whose deletes name the Lease's namespace."""

    def __init__(self, config: ApiConfig, namespace: str, request_timeout: float = 10.0):
        self.namespace, self.request_timeout = namespace, request_timeout
        self.api = KubeApi(config, request_timeout)

    @property
    def clock_offset(self) -> ClockOffset | None:
        """This node's clock against the API server's, as the last answer showed it."""
        return self.api.clock_offset

    def _path(self, name: str | None = None, namespace: str | None = None, **query: str) -> str:
        return path(COORDINATION, "leases", namespace or self.namespace or None, name, **query)

    async def _call(
        self, method: str, verb: str, url: str, body: Any = None, timeout: float | None = None
    ) -> Obj:
        obj = await self.api.call(method, url, f"{verb} leases", body, timeout)
        return obj if isinstance(obj, dict) else {}

    async def get(
        self, name: str, timeout: float | None = None, cached: bool = False
    ) -> Obj | None:
        """The Lease, None when absent. ``cached``: as the API server's watch cache has it
        (``resourceVersion=0``: no etcd read, maybe milliseconds behind), for what only
        speed depends on."""
        url = self._path(name, **({"resourceVersion": "0"} if cached else {}))
        try:
            obj = await self.api.call("GET", url, "get leases", timeout=timeout)
        except NotFound:
            return None
        return obj if isinstance(obj, dict) else None

    async def create(self, body: Obj, timeout: float | None = None) -> Obj:
        meta = {k: v for k, v in body["metadata"].items() if k != "resourceVersion"}
        return await self._call("POST", "create", self._path(), {**body, "metadata": meta}, timeout)

    async def replace(self, body: Obj, timeout: float | None = None) -> Obj:
        """PUT with the body's resourceVersion: 409 when someone wrote since."""
        url = self._path(body["metadata"]["name"])
        return await self._call("PUT", "update", url, body, timeout)

    async def patch(self, name: str, body: Obj, timeout: float | None = None) -> Obj:
        """A JSON merge patch: applied to whatever is there, unless it names the
        ``metadata.resourceVersion`` it must go over (409 otherwise)."""
        return await self._call("PATCH", "patch", self._path(name), body, timeout)

    async def delete(self, name: str, version: str, *, namespace: str | None = None) -> None:
        """Delete only if unchanged since resourceVersion ``version`` (409 otherwise)."""
        unless_changed = {"resourceVersion": version}
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": unless_changed}
        await self._call("DELETE", "delete", self._path(name, namespace), body)

    async def list(
        self, label_selector: str = "", field_selector: str = "", timeout: float | None = None
    ) -> tuple[list[Obj], str]:
        """(items, list resourceVersion)."""
        query = {"labelSelector": label_selector, "fieldSelector": field_selector}
        url = self._path(**{k: v for k, v in query.items() if v})
        data = await self._call("GET", "list", url, timeout=timeout)
        items = [i for i in data.get("items") or [] if isinstance(i, dict)]
        return items, str((data.get("metadata") or {}).get("resourceVersion", ""))

    async def watch(
        self, name: str, resource_version: str, timeout_seconds: int, label_selector: str = ""
    ) -> AsyncIterator[tuple[str, Obj]]:
        """Events (type, object) on one Lease (``name``; ``""``: every Lease the selector
        matches) from ``resource_version`` on (``""``: from the
        most recent, the Lease as it is then first); ends when the server ends the watch
        (``timeout_seconds``), ``Gone`` when the version is too old. With ``label_selector``,
        only the writes after which the Lease matches it, and as DELETED the write that ends
        a match (with the content before it) or deletes a Lease that matched."""
        query = {"watch": "1"} | ({"fieldSelector": f"metadata.name={name}"} if name else {})
        if label_selector:
            query["labelSelector"] = label_selector
        query |= {"allowWatchBookmarks": "true"}
        if resource_version:
            query["resourceVersion"] = resource_version
        url = self._path(**query, timeoutSeconds=str(timeout_seconds))
        async for event in self.api.stream(url, "watch leases", idle_timeout=timeout_seconds + 30):
            event = event if isinstance(event, dict) else {}
            kind, obj = event.get("type"), event.get("object")
            if kind == "ERROR":
                code = int(obj.get("code", 500)) if isinstance(obj, dict) else 500
                raise error_for(code, "watch leases", json.dumps(obj).encode())
            if isinstance(kind, str) and isinstance(obj, dict):
                yield kind, obj

    def close(self) -> None:
        self.api.close()
