"""``<state-dir>/state.json``, replaced atomically (write, rename).

A reader sees either the previous file or the next one, never a torn one: the
rename does that. The file is rewritten on every change (``State.comparable``):
every renew of a leader (``valid_until`` moves), none a follower sees
(``renewed_at`` alone). What leadership rests on is also synced (the file, then
its directory) so that it survives a power loss: the first write (it replaces
whatever a crashed run left), every "leading", and the first write after one.
A follower's news of a new holder is not: it claims nothing, and each of a
crowd's followers syncing it in the same milliseconds as the successor's claim
held its event loop in disk I/O (issue 38).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from ..core.state import State

STATE_FILE = "state.json"


class StateDirError(Exception):
    """The state directory cannot be written; the message says what to fix."""


class StateFile:
    def __init__(self, directory: Path):
        self.directory, self.path = directory, directory / STATE_FILE
        self._last: dict[str, Any] | None = None

    def check_writable(self) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise StateDirError(
                f"state dir {self.directory} cannot be created ({err.strerror}); mount a writable "
                "emptyDir there or pass --state-dir"
            ) from None
        if not os.access(self.directory, os.W_OK | os.X_OK):
            raise StateDirError(
                f"state dir {self.directory} is not writable by uid {os.getuid()}; mount a writable "
                "emptyDir there (fsGroup or matching runAsUser) or pass --state-dir"
            )

    def write(self, state: State, force: bool = False) -> bool:
        """Write ``state`` if it differs from the last write (``updated_at`` aside); True if written."""
        comparable = state.comparable()
        if not force and comparable == self._last:
            return False
        durable = self._last is None or state.is_leader or bool(self._last["is_leader"])
        data = (json.dumps(state.as_dict(), indent=2, sort_keys=False) + "\n").encode()
        tmp = self.directory / f".{STATE_FILE}.{os.getpid()}.tmp"
        try:
            with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), "wb") as fh:
                fh.write(data)
                if durable:
                    fh.flush()
                    os.fsync(fh.fileno())
            os.replace(tmp, self.path)
            if durable:
                self._sync_directory()
        except OSError as err:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise StateDirError(f"cannot write {self.path}: {err.strerror}") from None
        self._last = comparable
        return True

    def _sync_directory(self) -> None:
        """The rename itself survives a power loss (best effort: not every filesystem can)."""
        with contextlib.suppress(OSError):
            dfd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
