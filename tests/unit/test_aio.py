"""The shutdown's bounded steps: each failure or overrun is logged under its step's name (pure)."""

from __future__ import annotations

import asyncio
import functools
import io
import json
import time

from sidecar.kit.aio import bounded_steps
from sidecar.kit.logs import Logger
from sidecar.kube.errors import ApiUnavailable


async def release(reason: str) -> None:
    raise ApiUnavailable(f"cannot connect ({reason})", verb="update")


class Observer:
    async def after_release(self) -> None:
        await asyncio.sleep(5)


def test_a_failed_or_overrun_step_is_named_partials_too() -> None:
    """The release is a ``functools.partial``: it was logged as step ``""`` (seen in a pod)."""
    out = io.StringIO()
    steps = [functools.partial(release, "refused"), Observer().after_release]
    asyncio.run(
        bounded_steps(steps, 0.2, time.monotonic, Logger("info", stream=out), (ApiUnavailable,))
    )
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(r["msg"], r["step"]) for r in lines] == [
        ("shutdown step failed", "release"),
        ("shutdown budget spent; going on without waiting", "Observer.after_release"),
    ]
