"""Go-style durations (``15s``, ``1500ms``, ``1m30s``), as flags and annotations take them."""

from __future__ import annotations

import re

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")

ACCEPTED_FORM = "a duration such as 15s, 1500ms, 1m or 1m30s"


def parse_duration(text: str) -> float:
    """Seconds in ``text``; ValueError with the accepted form when it is not a duration."""
    value = text.strip()
    if not value or _PART.sub("", value) != "" or value[0] == ".":
        raise ValueError(f"{text!r} is not {ACCEPTED_FORM}")
    return sum(float(num) * _UNITS[unit] for num, unit in _PART.findall(value))


def format_duration(seconds: float) -> str:
    """The shortest exact spelling: ``15s``, ``1500ms``, ``2m``, ``24h``."""
    millis = round(seconds * 1000)
    for unit, size in (("h", 3600000), ("m", 60000), ("s", 1000)):
        if millis % size == 0 and (millis or unit == "s"):
            return f"{millis // size}{unit}"
    return f"{millis}ms"
