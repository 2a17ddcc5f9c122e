"""The few cluster-wide API calls the injector's duties make (sweep, auto-RBAC).

A thin layer over ``sidecar.kube.api`` (the same call path, credentials and
errors as the sidecar's), shaped as a small interface so the sweep and the
RBAC helper are plain functions, testable against a fake and against the real
API server alike.
"""

from __future__ import annotations

from typing import Any

from ..kube.api import ADMISSION, COORDINATION, CORE, RBAC, KubeApi, path, unless_changed
from ..kube.config import ApiConfig
from ..kube.errors import Conflict, NotFound


class ClusterApi:
    """Leases in every namespace, pods, and RBAC objects, through one ``KubeApi``."""

    def __init__(self, config: ApiConfig, request_timeout: float = 10.0):
        self.api = KubeApi(config, request_timeout)

    async def list_leases(self, label_selector: str) -> list[dict[str, Any]]:
        """Leases in all namespaces matching ``label_selector``."""
        url = path(COORDINATION, "leases", labelSelector=label_selector)
        data = await self.api.call("GET", url, "list leases")
        items = data.get("items") if isinstance(data, dict) else None
        return [i for i in items or [] if isinstance(i, dict)]

    async def pod_exists(self, namespace: str, name: str) -> bool:
        try:
            await self.api.call("GET", path(CORE, "pods", namespace, name), "get pods")
        except NotFound:
            return False
        return True

    async def delete_lease(self, namespace: str, name: str, resource_version: str) -> None:
        """Delete only if unchanged since ``resource_version`` (Conflict otherwise)."""
        await self.api.call(
            "DELETE",
            path(COORDINATION, "leases", namespace, name),
            "delete leases",
            unless_changed(resource_version),
        )

    async def create_rbac(self, namespace: str, resource: str, body: dict[str, Any]) -> bool:
        """POST a ``roles`` or ``rolebindings`` object; False when it already exists (409)."""
        try:
            await self.api.call("POST", path(RBAC, resource, namespace), f"create {resource}", body)
        except Conflict:
            return False
        return True

    async def label_policy_exists(self, name: str) -> bool:
        """Whether the ValidatingAdmissionPolicy ``name`` and its binding of that name exist."""
        for resource in ("validatingadmissionpolicies", "validatingadmissionpolicybindings"):
            try:
                await self.api.call("GET", path(ADMISSION, resource, None, name), f"get {resource}")
            except NotFound:
                return False
        return True

    def close(self) -> None:
        self.api.close()
