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


def served_names() -> set[str]:
    """Every sample name the sidecar's and the injector's ``/metrics`` serve.

    A counter with labels shows samples once it has one: one API error is counted.
    """
    from sidecar.driver.metrics import Metrics
    from sidecar.injector.metrics import InjectorMetrics

    sidecar = Metrics("leader-x")
    sidecar.api_errors["500"] += 1
    rendered = [*samples(sidecar.render()), *samples(InjectorMetrics().render())]
    return {name.split("{", 1)[0] for name in rendered}
