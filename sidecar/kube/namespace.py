"""Which namespace a command works in when the flag does not say (contract §7, "Namespace")."""

from __future__ import annotations

import os

from .config import ApiConfig


def resolve_namespace(explicit: str | None, config: ApiConfig) -> str:
    """Flag; else the service account's; else $POD_NAMESPACE; else the kubeconfig's; else default."""
    return pick_namespace(explicit, config.namespace, config.source.startswith("in-cluster"))


def pick_namespace(explicit: str | None, configured: str | None, in_cluster: bool) -> str:
    """The rule of ``resolve_namespace``, for any loader (``configured``: its namespace)."""
    if explicit:
        return explicit
    if in_cluster and configured:
        return configured
    return os.environ.get("POD_NAMESPACE") or configured or "default"
