"""What an API call can fail with: one exception class per answer a caller acts on."""

from __future__ import annotations

import json

#: The fix for a 403 on Leases, in every message that reports one.
RBAC_FIX = (
    "grant the pod's ServiceAccount a Role with get, list, watch, create, update, patch, delete "
    "on leases.coordination.k8s.io in this namespace (see manifests/rbac.yaml)"
)


class ApiError(Exception):
    """An answer from the API server that is not what we asked for."""

    def __init__(
        self, message: str, *, status: int = 0, verb: str = "", retry_after: float | None = None
    ):
        super().__init__(message)
        self.status, self.verb, self.retry_after = status, verb, retry_after


class ApiUnavailable(ApiError):
    """No answer, or 5xx/429: try again later (with backoff)."""


class Conflict(ApiError):
    """409: the object changed since we read it, or already exists (someone else wrote first)."""


class NotFound(ApiError):
    """404."""


class Forbidden(ApiError):
    """403: RBAC does not allow this verb on this resource."""


class Unauthorized(ApiError):
    """401: the credentials were rejected (expired or invalid token)."""


class Gone(ApiError):
    """410: the watch's resourceVersion is too old; re-read and start again."""


_KINDS = {401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict, 410: Gone}


def error_for(status: int, what: str, body: bytes, retry_after: str | None = None) -> ApiError:
    """The exception for an HTTP error answer; ``what`` is "<verb> <resource>", e.g. "get leases"."""
    try:
        data = json.loads(body)
        message = str(data.get("message", "")) if isinstance(data, dict) else ""
    except ValueError:
        message = body[:200].decode(errors="replace")
    try:
        after = float(retry_after) if retry_after else None
    except ValueError:
        after = None
    text = f"{what}: HTTP {status}" + (f": {message}" if message else "")
    cls = _KINDS.get(status, ApiUnavailable if status >= 500 or status == 429 else ApiError)
    return cls(text, status=status, verb=what.split(" ", 1)[0], retry_after=after)
