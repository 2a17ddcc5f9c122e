"""The sidecar's metrics the alerts read: the election's timing and how long the Lease has not changed."""

from __future__ import annotations

import math

from sidecar.core.timing import Timing
from sidecar.driver.metrics import Metrics
from tests.metrics import samples

NAME = 'name="leader-x"'


def test_timing_and_lease_age_are_rendered_and_unknown_is_nan() -> None:
    age = [math.inf]  # the elector's view before the first read: observed at -inf
    metrics = Metrics("leader-x", timing=Timing(lease_duration=15, renew_deadline=10))
    metrics.lease_unchanged = lambda: age[0]
    first = samples(metrics.render())
    assert first[f"grelmicro_sidecar_lease_duration_seconds{{{NAME}}}"] == 15
    assert first[f"grelmicro_sidecar_renew_deadline_seconds{{{NAME}}}"] == 10
    assert math.isnan(first[f"grelmicro_sidecar_lease_unchanged_seconds{{{NAME}}}"])
    age[0] = 3.25  # read at scrape time, not at publish time
    assert samples(metrics.render())[f"grelmicro_sidecar_lease_unchanged_seconds{{{NAME}}}"] == 3.25
    # Without an election wired (tests, docs): NaN, never a made-up number.
    bare = samples(Metrics("leader-x").render())
    assert math.isnan(bare[f"grelmicro_sidecar_lease_duration_seconds{{{NAME}}}"])
    assert math.isnan(bare[f"grelmicro_sidecar_lease_unchanged_seconds{{{NAME}}}"])
    assert bare["process_start_time_seconds"] > 0
