"""One way to talk to the API server, for the sidecar and the injector alike (contract §8).

``KubeApi``: JSON over one keep-alive connection, the config's credentials and
``Impersonate-*`` headers, a timeout, non-2xx answers raised as ``errors`` classes.
URL paths are built here, by ``path``, and nowhere else. Besides the Leases
(``leases``), the sidecar writes Events and its own pod's leader label, both here.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from .config import ApiConfig, ConfigError
from .errors import ApiUnavailable, Conflict, NotFound, Unauthorized, error_for
from .http import Fields, HttpClient, Unreachable
from .skew import ClockOffset, offset_from_date

CORE = "/api/v1"
COORDINATION = "/apis/coordination.k8s.io/v1"
RBAC = "/apis/rbac.authorization.k8s.io/v1"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
MERGE_PATCH = "application/merge-patch+json"
Post = Callable[[dict[str, Any]], Awaitable[Any]]


def path(
    group: str, resource: str, namespace: str | None = None, name: str | None = None, **query: str
) -> str:
    """``{group}/namespaces/{namespace}/{resource}/{name}?{query}``; all namespaces when None."""
    out = group + (f"/namespaces/{quote(namespace)}" if namespace is not None else "")
    out += f"/{resource}" + (f"/{quote(name)}" if name is not None else "")
    return out + ("?" + urlencode(query) if query else "")


class KubeApi:
    """JSON requests to the API server named by ``config``."""

    def __init__(self, config: ApiConfig, request_timeout: float = 10.0):
        self.config, self.request_timeout = config, request_timeout
        self.http = HttpClient(config.host, config.port, config.ssl_context if config.tls else None)
        #: This node's clock against the API server's, from the last answer's Date.
        self.clock_offset: ClockOffset | None = None

    def _headers(self, force_reload: bool = False) -> Fields:
        try:
            auth = self.config.authorization(force_reload)
        except ConfigError as err:
            raise Unauthorized(str(err), status=401) from None
        credentials = [("Authorization", auth)] if auth else []
        return [("Accept", "application/json"), *credentials, *self.config.impersonation]

    async def call(
        self, method: str, url: str, what: str, body: Any = None, timeout: float | None = None
    ) -> Any:
        """The decoded answer to ``method url``; ``what`` ("get leases") names it in errors.

        A PATCH is a JSON merge patch (RFC 7386: keys set or removed, nothing read
        first; a ``metadata.resourceVersion`` in it makes it apply only over that version).
        """
        verb = what.split(" ", 1)[0]
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        kind = MERGE_PATCH if method == "PATCH" else "application/json"
        url, timeout = self.config.base_path + url, timeout or self.request_timeout
        for reload in (False, True):
            headers = self._headers(reload) + ([("Content-Type", kind)] if data is not None else [])
            sent = time.time()
            try:
                resp = await self.http.request(method, url, headers, timeout, data)
            except Unreachable as err:
                raise ApiUnavailable(str(err), verb=verb) from None
            offset = offset_from_date(resp.headers.get("date"), sent, time.time())
            self.clock_offset = offset or self.clock_offset
            if resp.status != 401 or reload or self.config.token_file is None:
                break  # else a projected token may just have rotated: re-read it once
        if resp.status >= 300:
            raise error_for(resp.status, what, resp.body, resp.headers.get("retry-after"))
        try:
            return json.loads(resp.body) if resp.body else None
        except ValueError:
            raise ApiUnavailable(f"{what}: the answer is not JSON", verb=verb) from None

    async def stream(self, url: str, what: str, idle_timeout: float) -> AsyncIterator[Any]:
        """Each JSON line of a streamed answer (a watch); lines that are not JSON are skipped."""
        url, headers = self.config.base_path + url, self._headers()
        try:
            lines = self.http.stream_lines(url, headers, self.request_timeout, idle_timeout)
            async for status, line in lines:
                if status >= 300:
                    raise error_for(status, what, line)
                try:
                    yield json.loads(line)
                except ValueError:
                    continue
        except Unreachable as err:
            raise ApiUnavailable(str(err), verb=what.split(" ", 1)[0]) from None

    def close(self) -> None:
        self.http.close()


async def exists(api: KubeApi, url: str, what: str) -> bool:
    """Whether ``GET url`` finds the object (404: False; any other error is raised)."""
    try:
        await api.call("GET", url, what)
    except NotFound:
        return False
    return True


async def create(api: KubeApi, url: str, what: str, body: dict[str, Any]) -> bool:
    """``POST url``; False when the object already exists (409)."""
    try:
        await api.call("POST", url, what, body)
    except Conflict:
        return False
    return True


def api_poster(api: KubeApi, namespace: str) -> Post:
    """POST core/v1 Events through ``api``: the election's, whose kept-alive connection an
    Event held back until the election is idle rides, with no TLS handshake of its own."""

    async def post(body: dict[str, Any]) -> Any:
        return await api.call("POST", path(CORE, "events", namespace), "create events", body)

    return post


@dataclass
class PodLabel:
    """The leader label (contract §4), the only pod write: a merge patch of label ``key`` alone,
    nothing read first. Idempotent: a retry is safe, other writers' labels are untouched."""

    api: KubeApi
    namespace: str
    pod: str
    key: str
    value: str

    async def put(self, present: bool, timeout: float | None = None) -> None:
        body = {"metadata": {"labels": {self.key: self.value if present else None}}}
        url = path(CORE, "pods", self.namespace, self.pod)
        await self.api.call("PATCH", url, "patch pods", body, timeout)

    async def deleting(self, timeout: float | None = None) -> bool:
        """Whether this pod is being deleted (``deletionTimestamp`` set); raises ``errors``."""
        obj = await self.api.call(
            "GET", path(CORE, "pods", self.namespace, self.pod), "get pods", None, timeout
        )
        return bool(((obj or {}).get("metadata") or {}).get("deletionTimestamp"))
