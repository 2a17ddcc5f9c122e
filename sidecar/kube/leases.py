"""The Lease store: the only place that knows the API paths and status codes.

The election and the publishers see Lease objects as dicts and a handful of
exceptions; they never build HTTP requests. Every write is optimistic (the
body carries the ``resourceVersion`` it was built from); a 409 surfaces as
``Conflict``, which callers treat as "someone else won", never as an error.
"""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote, urlencode

from .config import ApiConfig, ConfigError
from .http import HttpClient, Unreachable

GROUP_PATH = "/apis/coordination.k8s.io/v1"


class ApiError(Exception):
    """An answer from the API server that is not what we asked for."""

    status: int = 0

    def __init__(
        self, message: str, *, status: int = 0, verb: str = "", retry_after: float | None = None
    ):
        super().__init__(message)
        self.status = status
        self.verb = verb
        self.retry_after = retry_after


class ApiUnavailable(ApiError):
    """No answer, or 5xx/429: try again later (with backoff)."""


class Conflict(ApiError):
    """409: the object changed since we read it (or already exists)."""


class NotFound(ApiError):
    """404."""


class Forbidden(ApiError):
    """403: RBAC does not allow this verb on leases."""


class Unauthorized(ApiError):
    """401: the credentials were rejected (expired or invalid token)."""


class Gone(ApiError):
    """410: the watch's resourceVersion is too old; re-read and start again."""


def error_for(status: int, what: str, body: bytes, retry_after: str | None = None) -> ApiError:
    """The exception for an HTTP error answer; ``what`` is "<verb> <resource>", e.g. "get leases"."""
    message = ""
    try:
        data = json.loads(body)
        if isinstance(data, dict):
            message = str(data.get("message", ""))
    except ValueError:
        message = body[:200].decode(errors="replace")
    after: float | None = None
    if retry_after:
        try:
            after = float(retry_after)
        except ValueError:
            after = None
    text = f"{what}: HTTP {status}" + (f": {message}" if message else "")
    kinds: dict[int, type[ApiError]] = {
        401: Unauthorized,
        403: Forbidden,
        404: NotFound,
        409: Conflict,
        410: Gone,
        429: ApiUnavailable,
    }
    cls = kinds.get(status, ApiUnavailable if status >= 500 else ApiError)
    return cls(text, status=status, verb=what.split(" ", 1)[0], retry_after=after)


class LeaseStore:
    """Lease operations in one namespace."""

    def __init__(self, config: ApiConfig, namespace: str, request_timeout: float = 10.0):
        self.config = config
        self.namespace = namespace
        self.request_timeout = request_timeout
        self.http = HttpClient(config.host, config.port, config.ssl_context if config.tls else None)

    def _path(self, name: str | None = None, **query: str) -> str:
        path = f"{self.config.base_path}{GROUP_PATH}/namespaces/{quote(self.namespace)}/leases"
        if name is not None:
            path += f"/{quote(name)}"
        if query:
            path += "?" + urlencode(query)
        return path

    def _auth_headers(self, force_reload: bool = False) -> list[tuple[str, str]]:
        headers = [("Accept", "application/json")]
        try:
            auth = self.config.authorization(force_reload)
        except ConfigError as err:
            raise Unauthorized(str(err), status=401) from None
        if auth:
            headers.append(("Authorization", auth))
        return headers

    async def _call(
        self, method: str, verb: str, path: str, body: Any = None, timeout: float | None = None
    ) -> Any:
        data = json.dumps(body, separators=(",", ":")).encode() if body is not None else None
        for attempt in (0, 1):
            headers = self._auth_headers(force_reload=attempt == 1)
            if data is not None:
                headers.append(("Content-Type", "application/json"))
            try:
                resp = await self.http.request(
                    method, path, headers, data, timeout=timeout or self.request_timeout
                )
            except Unreachable as err:
                raise ApiUnavailable(str(err), verb=verb) from None
            if resp.status == 401 and attempt == 0 and self.config.token_file is not None:
                continue  # the projected token may just have rotated: re-read it once
            if resp.status >= 300:
                raise error_for(
                    resp.status, f"{verb} leases", resp.body, resp.headers.get("retry-after")
                )
            try:
                return json.loads(resp.body) if resp.body else None
            except ValueError:
                raise ApiUnavailable(f"{verb} leases: the answer is not JSON", verb=verb) from None
        raise AssertionError("unreachable")  # pragma: no cover

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

    async def delete(self, name: str, resource_version: str, timeout: float | None = None) -> None:
        """Delete only if unchanged since ``resource_version`` (409 otherwise)."""
        options = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "preconditions": {"resourceVersion": resource_version},
        }
        await self._call("DELETE", "delete", self._path(name), options, timeout=timeout)

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
        try:
            async for status, line in self.http.stream_lines(
                path,
                self._auth_headers(),
                connect_timeout=self.request_timeout,
                idle_timeout=timeout_seconds + 30,
            ):
                if status >= 300:
                    raise error_for(status, "watch leases", line)
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                kind = event.get("type") if isinstance(event, dict) else None
                obj = event.get("object") if isinstance(event, dict) else None
                if kind == "ERROR":
                    code = int(obj.get("code", 500)) if isinstance(obj, dict) else 500
                    raise error_for(code, "watch leases", json.dumps(obj).encode())
                if isinstance(kind, str) and isinstance(obj, dict):
                    yield kind, obj
        except Unreachable as err:
            raise ApiUnavailable(str(err), verb="watch") from None

    def close(self) -> None:
        self.http.close()


def jittered(seconds: float) -> float:
    """``seconds`` ± 20 %, so many sidecars never move in lockstep."""
    return seconds * random.uniform(0.8, 1.2)
