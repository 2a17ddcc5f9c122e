"""Prometheus exposition text, parsed by the reference parser (``prometheus_client``, test-only).

A substring check passes on output Prometheus would refuse; parsing with the
real parser fails the test on any malformed line, then the samples are
compared by name and labels.
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def samples(text: str) -> dict[str, float]:
    """Every sample as ``name{label="value",...}`` (labels sorted) -> value."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            out[f"{sample.name}{{{labels}}}" if labels else sample.name] = float(sample.value)
    return out
