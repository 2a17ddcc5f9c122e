"""The Lease store: Lease operations in one namespace, as the election needs them.

The election and the publishers see Lease objects as dicts and the ``errors``
classes; they never build HTTP requests (``api`` does). Every write is
optimistic (the body carries the ``resourceVersion`` it was built from); a
409 surfaces as ``Conflict``, which callers treat as "someone else won",
never as an error.
"""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator
from typing import Any

from .api import COORDINATION, MERGE_PATCH, KubeApi, path, unless_changed
from .config import ApiConfig
from .errors import NotFound, error_for
from .skew import ClockOffset


class LeaseStore:
    """Lease operations in one namespace; with ``""``, lists of every namespace (``status -A``,
    the injector's sweep), whose deletes name the Lease's namespace."""

    def __init__(self, config: ApiConfig, namespace: str, request_timeout: float = 10.0):
        self.config = config
        self.namespace = namespace
        self.request_timeout = request_timeout
        self.api = KubeApi(config, request_timeout)

    @property
    def clock_offset(self) -> ClockOffset | None:
        """This node's clock against the API server's, as the last answer showed it."""
        return self.api.clock_offset

    def _path(self, name: str | None = None, namespace: str | None = None, **query: str) -> str:
        # An empty namespace lists every namespace (status -A); the election always has one.
        return path(COORDINATION, "leases", namespace or self.namespace or None, name, **query)

    async def _call(
        self, method: str, verb: str, url: str, body: Any = None, timeout: float | None = None
    ) -> Any:
        return await self.api.call(method, url, f"{verb} leases", body, timeout)

    async def get(self, name: str, timeout: float | None = None) -> dict[str, Any] | None:
        try:
            obj = await self._call("GET", "get", self._path(name), timeout=timeout)
        except NotFound:
            return None
        return obj if isinstance(obj, dict) else None

    async def create(self, body: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        body = {
            **body,
            "metadata": {k: v for k, v in body["metadata"].items() if k != "resourceVersion"},
        }
        obj = await self._call("POST", "create", self._path(), body, timeout=timeout)
        return obj if isinstance(obj, dict) else {}

    async def replace(self, body: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        """PUT with the body's resourceVersion: 409 when someone wrote since."""
        obj = await self._call(
            "PUT", "update", self._path(body["metadata"]["name"]), body, timeout=timeout
        )
        return obj if isinstance(obj, dict) else {}

    async def patch(
        self, name: str, body: dict[str, Any], timeout: float | None = None
    ) -> dict[str, Any]:
        """JSON merge patch, no resourceVersion: the API server applies it to whatever is there."""
        obj = await self.api.call(
            "PATCH", self._path(name), "patch leases", body, timeout, content_type=MERGE_PATCH
        )
        return obj if isinstance(obj, dict) else {}

    async def delete(
        self,
        name: str,
        resource_version: str,
        timeout: float | None = None,
        *,
        namespace: str | None = None,
    ) -> None:
        """Delete only if unchanged since ``resource_version`` (409 otherwise).

        ``namespace``: the Lease's, for a store of every namespace (the injector's sweep).
        """
        url = self._path(name, namespace)
        await self._call("DELETE", "delete", url, unless_changed(resource_version), timeout=timeout)

    async def list(
        self, label_selector: str = "", field_selector: str = "", timeout: float | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        """(items, list resourceVersion)."""
        query = {}
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        data = await self._call("GET", "list", self._path(**query), timeout=timeout)
        if not isinstance(data, dict):
            return [], ""
        items = [i for i in data.get("items") or [] if isinstance(i, dict)]
        return items, str((data.get("metadata") or {}).get("resourceVersion", ""))

    async def watch(
        self, name: str, resource_version: str, timeout_seconds: int
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """Events (type, object) on one Lease from ``resource_version`` on.

        Ends normally when the server closes the watch (``timeout_seconds``);
        raises ``Gone`` when the version is too old, ``ApiUnavailable`` on loss.
        """
        path = self._path(
            watch="1",
            fieldSelector=f"metadata.name={name}",
            resourceVersion=resource_version,
            allowWatchBookmarks="true",
            timeoutSeconds=str(timeout_seconds),
        )
        async for event in self.api.stream(path, "watch leases", idle_timeout=timeout_seconds + 30):
            kind = event.get("type") if isinstance(event, dict) else None
            obj = event.get("object") if isinstance(event, dict) else None
            if kind == "ERROR":
                code = int(obj.get("code", 500)) if isinstance(obj, dict) else 500
                raise error_for(code, "watch leases", json.dumps(obj).encode())
            if isinstance(kind, str) and isinstance(obj, dict):
                yield kind, obj

    def close(self) -> None:
        self.api.close()


def jittered(seconds: float) -> float:
    """``seconds`` ± 20 %, so many sidecars never move in lockstep."""
    return seconds * random.uniform(0.8, 1.2)
