"""Prometheus text exposition (format 0.0.4), for the sidecar's and the injector's ``/metrics``.

A handful of metric families need no client library: ``Exposition`` writes
``# HELP``/``# TYPE`` once per family and one line per sample, escaping label
values as the format requires; ``Histogram`` keeps cumulative buckets, a sum
and a count. The output parses with the reference parser (the tests read it
with ``prometheus_client``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
Labels = Mapping[str, str]
_ESCAPE = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n"})  # label values


@dataclass
class Histogram:
    buckets: Sequence[float]
    counts: list[int] = field(default_factory=list)
    count: int = 0
    sum: float = 0.0

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.buckets)

    def observe(self, value: float) -> None:
        self.count += 1
        self.sum += value
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1


class Exposition:
    """Families added in order, rendered by ``text``."""

    def __init__(self) -> None:
        self._lines: list[str] = []

    def family(
        self, kind: str, name: str, help_: str, samples: Iterable[tuple[Labels, float]]
    ) -> None:
        """A ``gauge`` or ``counter`` family: one line per (labels, value)."""
        self._lines += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]
        self._lines += [f"{name}{_labels(labels)} {_number(value)}" for labels, value in samples]

    def histogram(self, name: str, help_: str, hists: Iterable[tuple[Labels, Histogram]]) -> None:
        """A ``histogram`` family: each (labels, histogram)'s buckets, sum and count."""
        self.family("histogram", name, help_, [])
        for labels, hist in hists:
            bounds = [*map(_number, hist.buckets), "+Inf"]
            for bound, count in zip(bounds, [*hist.counts, hist.count], strict=True):
                self._lines.append(f"{name}_bucket{_labels({**labels, 'le': bound})} {count}")
            self._lines.append(f"{name}_sum{_labels(labels)} {_number(hist.sum)}")
            self._lines.append(f"{name}_count{_labels(labels)} {hist.count}")

    def text(self) -> str:
        return "\n".join(self._lines) + "\n"


def _labels(labels: Labels) -> str:
    pairs = ",".join(f'{k}="{v.translate(_ESCAPE)}"' for k, v in labels.items())
    return "{" + pairs + "}" if labels else ""


def _number(value: float | str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, int) or (value.is_integer() and abs(value) < 1e15):
        return str(int(value))
    return repr(value)
