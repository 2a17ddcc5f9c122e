"""Logs: one JSON object per line on stderr, through the standard ``logging`` module.

Every record has ``ts``, ``level`` and ``msg``, then the logger's context and
the call's fields. asyncio already imports ``logging``, so building on it costs
the sidecar nothing, and libraries that log through it (kopf and aiohttp in the
injector) come out in the same format once ``capture_libraries`` installs the
same handler on the root logger. ``Logger.once`` logs a message only the first
time per key (e.g. a 403 that repeats every retry). Writing never raises: a
closed stderr must never take the sidecar down.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from functools import partialmethod
from typing import Any, TextIO

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING}
LEVELS["error"] = logging.ERROR
_NAMES = {number: name for name, number in LEVELS.items()}
_OWN = "grelmicro-sidecar"


class _LineHandler(logging.Handler):
    """``{"ts", "level", "msg", **context, **fields}``, one line a record on ``stream``
    (``sys.stderr`` as it is at each write); a library's records also name their logger."""

    def __init__(self, stream: TextIO | None, context: dict[str, Any]):
        super().__init__()
        self.stream, self.context = stream, context

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # a library's bad format string must not lose the record
            message = str(record.msg)
        ts = dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds")
        level = "error" if record.levelno >= logging.ERROR else _NAMES.get(record.levelno, "info")
        out = {"ts": ts.replace("+00:00", "Z"), "level": level, "msg": message, **self.context}
        if record.name != _OWN:
            out["logger"] = record.name
        out.update(getattr(record, "fields", {}))
        try:
            stream = self.stream or sys.stderr
            stream.write(json.dumps(out, default=str, ensure_ascii=False) + "\n")
            stream.flush()
        except (OSError, ValueError):
            pass


class Logger:
    """A JSON logger with fixed context fields and once-per-key messages.

    Each instance has its own level, stream and context (an unregistered
    ``logging.Logger``), so a test or a command can hold one without touching
    global logging state.
    """

    def __init__(self, level: str = "info", stream: TextIO | None = None, **context: Any):
        self.stream = stream
        self._handler = _LineHandler(stream, context)
        self._logger = logging.Logger(_OWN, LEVELS[level])
        self._logger.propagate = False
        self._logger.addHandler(self._handler)
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
        """``forget`` every key that starts with one of ``prefixes``."""
        self._once = {k for k in self._once if not k.startswith(prefixes)}

    def capture_libraries(self, level: str) -> None:
        """Send every library's ``logging`` records (kopf, aiohttp) out as this logger's lines,
        at ``level`` and above."""
        root = logging.getLogger()
        root.handlers[:] = [self._handler]
        root.setLevel(LEVELS[level])
