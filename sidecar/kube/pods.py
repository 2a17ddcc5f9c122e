"""One label on one pod: the only pod write the sidecar makes (the leader label, contract §4).

A JSON merge patch of ``metadata.labels`` alone, nothing read first: setting a
label to a value, or removing it (``null``), is idempotent, so a retry after a
lost answer is always safe and a concurrent writer of other labels is never
overwritten. The admission policy of contract §8 lets a sidecar's token make
exactly this change to exactly its own pod.
"""

from __future__ import annotations

from .api import CORE, MERGE_PATCH, KubeApi, path


class PodLabel:
    """Set or remove label ``key`` on pod ``namespace``/``pod``."""

    def __init__(self, api: KubeApi, namespace: str, pod: str, key: str, value: str):
        self.api = api
        self.namespace = namespace
        self.pod = pod
        self.key = key
        self.value = value

    async def put(self, present: bool, timeout: float | None = None) -> None:
        """Make the label present (with its value) or absent; raises ``errors`` classes."""
        body = {"metadata": {"labels": {self.key: self.value if present else None}}}
        await self.api.call(
            "PATCH",
            path(CORE, "pods", self.namespace, self.pod),
            "patch pods",
            body,
            timeout,
            content_type=MERGE_PATCH,
        )
