"""The few cluster-wide API calls the injector's duties make (sweep, RBAC).

Built on the project's own HTTP client and cluster config (``sidecar.kube``),
not on kopf's: the sweep and the RBAC helper are plain functions of a small
interface, testable against a fake and against the real API server alike.
Errors come out as the ``sidecar.kube.leases`` exception classes.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote, urlencode

from ..kube.config import ApiConfig, ConfigError
from ..kube.http import HttpClient, Unreachable
from ..kube.leases import (
    ApiUnavailable,
    Conflict,
    NotFound,
    Unauthorized,
    error_for,
)

LEASES = "/apis/coordination.k8s.io/v1"


class ClusterApi:
    """JSON over one keep-alive HTTP client to the API server."""

    def __init__(self, config: ApiConfig, request_timeout: float = 10.0):
        self.config = config
        self.request_timeout = request_timeout
        self.http = HttpClient(config.host, config.port, config.ssl_context if config.tls else None)

    async def call(self, method: str, path: str, what: str, body: Any = None) -> Any:
        data = json.dumps(body, separators=(",", ":")).encode() if body is not None else None
        headers = [("Accept", "application/json")]
        try:
            auth = self.config.authorization()
        except ConfigError as err:
            raise Unauthorized(str(err), status=401) from None
        if auth:
            headers.append(("Authorization", auth))
        if data is not None:
            headers.append(("Content-Type", "application/json"))
        try:
            resp = await self.http.request(
                method, self.config.base_path + path, headers, data, timeout=self.request_timeout
            )
        except Unreachable as err:
            raise ApiUnavailable(f"{what}: {err}", verb=what.split(" ", 1)[0]) from None
        if resp.status >= 300:
            raise error_for(resp.status, what, resp.body)
        try:
            return json.loads(resp.body) if resp.body else None
        except ValueError:
            raise ApiUnavailable(f"{what}: the answer is not JSON") from None

    async def list_leases(self, label_selector: str) -> list[dict[str, Any]]:
        """Leases in all namespaces matching ``label_selector``."""
        path = f"{LEASES}/leases?" + urlencode({"labelSelector": label_selector})
        data = await self.call("GET", path, "list leases")
        items = data.get("items") if isinstance(data, dict) else None
        return [i for i in items or [] if isinstance(i, dict)]

    async def pod_exists(self, namespace: str, name: str) -> bool:
        try:
            await self.call(
                "GET", f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}", "get pods"
            )
        except NotFound:
            return False
        return True

    async def delete_lease(self, namespace: str, name: str, resource_version: str) -> None:
        """Delete only if unchanged since ``resource_version`` (Conflict otherwise)."""
        options = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "preconditions": {"resourceVersion": resource_version},
        }
        await self.call(
            "DELETE",
            f"{LEASES}/namespaces/{quote(namespace)}/leases/{quote(name)}",
            "delete leases",
            options,
        )

    async def create(self, path: str, body: dict[str, Any], what: str) -> bool:
        """POST; False when it already exists (409)."""
        try:
            await self.call("POST", path, what, body)
        except Conflict:
            return False
        return True

    def close(self) -> None:
        self.http.close()
