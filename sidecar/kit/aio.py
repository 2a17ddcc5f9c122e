"""asyncio idioms the layers share: background tasks, cancelling them without waiting forever, bounded steps.

Guarantees: a ``Background`` task is referenced until it ends (asyncio keeps
only weak references: an unreferenced task may be collected mid-flight);
``cancel`` returns within its timeout whatever the tasks do (a task that
ignores its cancellation is named in a warning, never waited for), and
retrieves every exception so none is reported twice; ``bounded_steps`` runs
each step within what is left of one budget, logging one that overruns or
fails and going on with the next.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator
from typing import Any

from .logs import Logger


class Background:
    """Tasks started and forgotten by their starter, each held until it ends."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(work, name=self.name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def __iter__(self) -> Iterator[asyncio.Task[None]]:
        return iter(list(self._tasks))

    def __len__(self) -> int:
        return len(self._tasks)

    def cancel(self) -> None:
        """Cancel every task still running (without waiting for them)."""
        for task in self:
            task.cancel()


async def cancel(tasks: Iterable[asyncio.Task[Any]], timeout: float, log: Logger) -> None:
    """Cancel ``tasks`` and wait for them, at most ``timeout`` seconds."""
    tasks = list(tasks)
    for task in tasks:
        task.cancel()
    if not tasks:
        return
    stopped, stuck = await asyncio.wait(tasks, timeout=timeout)
    for task in stopped:
        if not task.cancelled():
            task.exception()  # retrieved: whoever owns it reported a failure already
    for task in stuck:
        log.warning("a task did not stop when cancelled", task=task.get_name())


async def bounded_steps(
    steps: Iterable[Callable[[], Awaitable[None]]],
    budget: float,
    monotonic: Callable[[], float],
    log: Logger,
    expected: tuple[type[Exception], ...] = (),
) -> None:
    """Run ``steps`` one after the other within ``budget`` seconds in all.

    A step that overruns what is left is cut (and the next one still runs, with
    at least 0.1 s); one that raises one of ``expected`` is logged and skipped.
    """
    deadline = monotonic() + budget
    for step in steps:
        try:
            async with asyncio.timeout(max(0.1, deadline - monotonic())):
                await step()
        except TimeoutError:
            log.warning(
                "shutdown budget spent; going on without waiting",
                step=_name(step),
                budget_seconds=budget,
            )
        except expected as err:
            log.warning("shutdown step failed", step=_name(step), error=str(err))


def _name(step: Callable[[], Awaitable[None]]) -> str:
    """What a step is called in the logs (a ``functools.partial`` by what it calls)."""
    called = getattr(step, "func", step)
    return str(getattr(called, "__qualname__", repr(called)))
