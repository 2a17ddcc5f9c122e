"""Logs: one JSON object per line on stderr, cheap enough for every pod.

The standard ``logging`` machinery is more than a sidecar needs; this keeps
the format fixed (``ts``, ``level``, ``msg`` then fields) and lets a message be
logged only once per key (e.g. a 403 that repeats every retry).
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from typing import Any, TextIO

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}


class Logger:
    def __init__(self, level: str = "info", stream: TextIO | None = None, **context: Any):
        self.threshold = LEVELS[level]
        self.stream = stream
        self.context = context
        self._once: set[str] = set()

    def log(self, level: str, msg: str, **fields: Any) -> None:
        if LEVELS[level] < self.threshold:
            return
        record = {
            "ts": dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": level,
            "msg": msg,
            **self.context,
            **fields,
        }
        stream = self.stream or sys.stderr
        try:
            stream.write(json.dumps(record, default=str, ensure_ascii=False) + "\n")
            stream.flush()
        except (OSError, ValueError):
            pass  # a closed stderr must never take the sidecar down

    def debug(self, msg: str, **fields: Any) -> None:
        self.log("debug", msg, **fields)

    def info(self, msg: str, **fields: Any) -> None:
        self.log("info", msg, **fields)

    def warning(self, msg: str, **fields: Any) -> None:
        self.log("warning", msg, **fields)

    def error(self, msg: str, **fields: Any) -> None:
        self.log("error", msg, **fields)

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
