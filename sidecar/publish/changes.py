"""Change notifications: a numbered sequence of published states that readers can wait on.

Guarantees: the version grows by one exactly when the published state differs
from the previous one (``State.comparable``: the same rule as the state file),
so a reader that remembers the version it last saw cannot miss a change, even
one that happened between two of its requests. Waiting never blocks the
election: ``offer`` only stores the state and wakes waiters.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque

from ..core.state import State

#: Changes kept for a stream that fell behind; one further behind skips to these.
HISTORY = 64


class Changes:
    def __init__(self, first: State):
        self.version, self.state, self.closed = 1, first, False
        self._comparable, self._changed = first.comparable(), asyncio.Event()
        self._recent: deque[tuple[int, State]] = deque([(1, first)], maxlen=HISTORY)

    def offer(self, state: State) -> bool:
        """Record ``state`` as published; True (and waiters woken) if it is a change."""
        comparable = state.comparable()
        if comparable == self._comparable:
            return False
        self.version += 1
        self.state, self._comparable = state, comparable
        self._recent.append((self.version, state))
        self._wake()
        return True

    def since(self, version: int) -> list[tuple[int, State]]:
        """The kept changes after ``version``, oldest first."""
        return [(v, state) for v, state in self._recent if v > version]

    def close(self) -> None:
        """No more changes (shutdown): every waiter returns now."""
        self.closed = True
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait(self, seen: int | None, timeout: float) -> int:
        """The version once it differs from ``seen`` (None: the version now), or after ``timeout``."""
        changed = self._changed
        if seen in (None, self.version) and not self.closed:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await changed.wait()
        return self.version
