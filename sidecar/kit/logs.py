"""Logs: one JSON object per line on stderr (``ts``, ``level``, ``msg``, context, fields).

Through ``logging``, which asyncio imports anyway, so libraries (kopf, aiohttp) come out in
the same lines. Writing never raises: a closed stderr must never take the sidecar down.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from functools import partialmethod
from typing import Any, TextIO

from ..core.defaults import LOG_LEVELS

LEVELS: dict[str, int] = {name: getattr(logging, name.upper()) for name in LOG_LEVELS}
_NAMES = {number: name for name, number in LEVELS.items()}
_OWN = "grelmicro-sidecar"


class Logger(logging.Handler):
    """A JSON logger with fixed context fields and once-per-key messages (a 403 that repeats
    every retry). It is the handler of its own unregistered ``logging.Logger``: each has its
    level, stream (``sys.stderr`` as it is at each write) and context, no global state."""

    def __init__(self, level: str = "info", stream: TextIO | None = None, **context: Any):
        super().__init__()
        self.stream, self.context = stream, context
        self._logger = logging.Logger(_OWN, LEVELS[level])
        self._logger.propagate = False
        self._logger.addHandler(self)
        self._once: set[str] = set()

    def log(self, level: str, msg: str, **fields: Any) -> None:
        self._logger.log(LEVELS[level], msg, extra={"fields": fields})

    debug = partialmethod(log, "debug")
    info = partialmethod(log, "info")
    warning = partialmethod(log, "warning")
    error = partialmethod(log, "error")

    def once(self, key: str, level: str, msg: str, **fields: Any) -> None:
        """Log ``msg`` the first time ``key`` is seen; later calls are silent."""
        if key not in self._once:
            self._once.add(key)
            self.log(level, msg, **fields)

    def forget(self, key: str) -> None:
        """Let ``once(key, ...)`` log again (the condition cleared, then came back)."""
        self._once.discard(key)

    def forget_prefix(self, *prefixes: str) -> None:
        self._once = {k for k in self._once if not k.startswith(prefixes)}

    def capture_libraries(self, level: str) -> None:
        """Every library's records (kopf, aiohttp) at ``level`` and above, as this one's lines."""
        root = logging.getLogger()
        root.handlers[:] = [self]
        root.setLevel(LEVELS[level])

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # a library's bad format string must not lose the record
            message = str(record.msg)
        ts = dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds")
        level = "error" if record.levelno >= logging.ERROR else _NAMES.get(record.levelno, "info")
        out = {"ts": ts.replace("+00:00", "Z"), "level": level, "msg": message, **self.context}
        if record.name != _OWN:  # a library's
            out["logger"] = record.name
        out.update(getattr(record, "fields", {}))
        try:
            stream = self.stream or sys.stderr
            stream.write(json.dumps(out, default=str, ensure_ascii=False) + "\n")
            stream.flush()
        except (OSError, ValueError):
            pass
