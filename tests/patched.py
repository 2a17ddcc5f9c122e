"""The pod as the API server stores it after an admission response.

The API server applies the webhook's JSON patch (RFC 6902); tests apply
the same patch with ``jsonpatch`` so they check what a cluster would hold,
not a second hand-written walk over the changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jsonpatch

from sidecar.injector.patch import Decision


def patched(pod: Mapping[str, Any], decision: Decision) -> dict[str, Any]:
    """``pod`` after ``decision``'s JSON patch; the input is left untouched."""
    out: dict[str, Any] = jsonpatch.apply_patch(dict(pod), decision.json_patch())
    return out
