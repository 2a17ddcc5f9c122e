"""One label on one pod: the only pod write the sidecar makes (the leader label, contract §4).

A JSON merge patch of ``metadata.labels`` alone, nothing read first: setting a
label to a value, or removing it (``null``), is idempotent, so a retry after a
lost answer is always safe and a concurrent writer of other labels is never
overwritten. The admission policy of contract §8 lets a sidecar's token make
exactly this change to exactly its own pod.
"""

from __future__ import annotations

from dataclasses import dataclass

from .api import CORE, KubeApi, path


@dataclass
class PodLabel:
    """Set or remove label ``key`` on pod ``namespace``/``pod``."""

    api: KubeApi
    namespace: str
    pod: str
    key: str
    value: str

    async def put(self, present: bool, timeout: float | None = None) -> None:
        """Make the label present (with its value) or absent; raises ``errors`` classes."""
        body = {"metadata": {"labels": {self.key: self.value if present else None}}}
        url = path(CORE, "pods", self.namespace, self.pod)
        await self.api.call("PATCH", url, "patch pods", body, timeout)
