"""Which namespace a command works in when the flag does not say (contract §7, "Namespace")."""

from __future__ import annotations

import os

from .apiconfig import ApiConfig


def resolve_namespace(explicit: str | None, config: ApiConfig) -> str:
    """The flag; the service account's; $POD_NAMESPACE; the kubeconfig's; else ``default``."""
    own = config.namespace if config.in_cluster else None
    return explicit or own or os.environ.get("POD_NAMESPACE") or config.namespace or "default"
