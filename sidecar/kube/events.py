"""Posting core/v1 Events, over a connection of their own opened on the first one.

A follower that never leads never records an Event, so it never opens it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from .api import CORE, KubeApi, path
from .config import ApiConfig

Post = Callable[[dict[str, Any]], Awaitable[Any]]


def api_poster(config: ApiConfig, namespace: str, request_timeout: float) -> Post:
    """POST to the namespace's events, over a connection opened on first use."""
    opened: list[KubeApi] = []

    async def post(body: dict[str, Any]) -> Any:
        if not opened:
            opened.append(KubeApi(config, request_timeout))
        return await opened[0].call("POST", path(CORE, "events", namespace), "create events", body)

    return post
