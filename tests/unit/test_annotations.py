"""Annotations fuzzed against the injector's validation: what it accepts, the sidecar must accept.

Already covered by the injector's own suites (not repeated here):
tests/unit/injector/test_fuzz.py (pure: never raises, a denial names the
annotation, a valid idempotent patch) and tests/injector/test_fuzz_cluster.py
(through the real API server: never a 500, a clear denial or an accepted pod).

Missing, and added here: the two validations agree. Every pod the injector
lets through runs ``grelmicro-sidecar run`` with the injected args; if the
sidecar's own settings refused them, the pod would crash-loop with exit 2
after admission said yes. So for every accepted pod, the injected args go
through the sidecar's real parser and validation, and come out as the values
the annotations asked for.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sidecar.commands.cli import build_parser
from sidecar.commands.settings import SettingsError, run_settings
from sidecar.core.durations import parse_duration
from sidecar.injector.annotations import KNOWN, PREFIX
from sidecar.injector.patch import CONTAINER_NAME, SidecarSpec, _decide
from sidecar.kit.options import SIDECAR_ENV, Source
from tests.patched import patched

SPEC = SidecarSpec(image="img:1")

durations = st.one_of(
    st.sampled_from(
        [
            "15s",
            "10s",
            "2s",
            "1m",
            "1m30s",
            "1500ms",
            "15500ms",
            "0.5s",
            "2.5s",
            "1ms",
            "24h",
            "86400s",
            "86401s",
            "25h",
            "0s",
            "-1s",
            "1h",
            "3s",
            "1.2s",
            "999ms",
        ]
    ),
    st.builds(
        lambda n, u: f"{n}{u}", st.integers(0, 100000), st.sampled_from(["ms", "s", "m", "h"])
    ),
)
values = {
    PREFIX + "lease-duration": durations,
    PREFIX + "renew-deadline": durations,
    PREFIX + "retry-period": durations,
    PREFIX + "port": st.one_of(
        st.integers(-5, 70000).map(str), st.sampled_from(["http", "", "4040 ", "0x10"])
    ),
    PREFIX + "state-dir": st.one_of(
        st.sampled_from(["/var/run/x", "/", "/a/../b", "/run/a.b/c_d", "rel", "/x/"]),
        st.text(max_size=20),
    ),
    PREFIX + "name": st.one_of(
        st.sampled_from(["main", "My App", "---", "ÉLU", "a" * 300]), st.text(max_size=30)
    ),
    PREFIX + "gate-readiness": st.sampled_from(["true", "false", "True", "yes", ""]),
    PREFIX + "label-leader": st.sampled_from(["true", "false", "on", ""]),
    PREFIX + "health-url": st.sampled_from(
        [
            "http://127.0.0.1:8080/healthz",
            "http://localhost/h?x=1",
            "http://[::1]:99/x",
            "https://127.0.0.1/",
            "http://10.0.0.1/",
            "http://127.0.0.1:99999/",
            "",
        ]
    ),
    PREFIX + "health-file": st.sampled_from(["true", "false", "yes", ""]),
    PREFIX + "health-file-age": durations,
    PREFIX + "health-period": durations,
    PREFIX + "health-timeout": durations,
    PREFIX + "health-hold": durations,
    PREFIX + "health-failures": st.sampled_from(["1", "3", "100", "0", "101", "x", ""]),
    PREFIX + "health-successes": st.sampled_from(["1", "2", "0", "-1"]),
    PREFIX + "when-none-healthy": st.sampled_from(["keep", "nobody", "Keep", ""]),
    PREFIX + "shards": st.sampled_from(["1", "2", "12", "64", "0", "65", "¹", "", "x"]),
}
random_notes = st.fixed_dictionaries({}, optional=values)


@st.composite
def plausible_notes(draw: st.DrawFn) -> dict[str, str]:
    """Mostly valid settings (a consistent timing in ms), so the accepted path is well exercised."""
    retry = draw(st.integers(1, 60_000))
    renew = draw(st.integers(retry * 6 // 5 + 1, retry * 6 // 5 + 120_000))
    lease = draw(st.integers(renew // 1000 + 1, renew // 1000 + 3600)) * 1000
    out = {
        PREFIX + "lease-duration": f"{lease // 1000}s",
        PREFIX + "renew-deadline": f"{renew}ms",
        PREFIX + "retry-period": draw(st.sampled_from([f"{retry}ms", f"{retry / 1000:g}s"])),
        PREFIX + "port": str(draw(st.integers(1, 65535))),
        PREFIX + "state-dir": draw(
            st.sampled_from(["/var/run/x", "/run/a.b/c_d", "/var/run/leader-election"])
        ),
        PREFIX + "name": draw(st.sampled_from(["main", "My App", "ÉLU", "x.y_z"])),
        PREFIX + "gate-readiness": draw(st.sampled_from(["true", "false"])),
        PREFIX + "label-leader": draw(st.sampled_from(["true", "false"])),
        PREFIX + "shards": draw(st.sampled_from(["1", "3", "12"])),
    }
    keep = draw(st.sets(st.sampled_from(sorted(out))))
    return {k: v for k, v in out.items() if k in keep}


notes = st.one_of(random_notes, plausible_notes()).map(lambda d: {**d, PREFIX + "inject": "true"})


def sidecar_settings(container: dict[str, Any]) -> Any:
    args = build_parser().parse_args(container["args"])
    # The downward API gives POD_NAME in a pod; no GRELMICRO_SIDECAR_* variables.
    return run_settings(Source(args, SIDECAR_ENV, {"POD_NAME": "p"}))


@settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck))
@given(notes)
def test_what_the_injector_accepts_the_sidecar_accepts(annotations: dict[str, str]) -> None:
    pod = {
        "metadata": {"name": "p", "annotations": annotations},
        "spec": {"containers": [{"name": "app"}]},
    }
    decision = _decide(pod, SPEC)
    if decision.outcome == "denied":
        return  # tests/unit/injector/test_fuzz.py judges denials
    assert decision.outcome == "injected", decision
    out = patched(pod, decision)
    (container,) = [c for c in out["spec"]["initContainers"] if c["name"] == CONTAINER_NAME]
    try:
        got = sidecar_settings(container)
    except SettingsError as err:
        raise AssertionError(
            f"admitted, but the sidecar refuses its args: {err}\n{annotations}"
        ) from None
    for setting, actual in [
        ("lease-duration", got.timing.lease_duration),
        ("renew-deadline", got.timing.renew_deadline),
        ("retry-period", got.timing.retry_period),
    ]:
        asked = annotations.get(PREFIX + setting)
        if asked is not None:
            assert actual == pytest.approx(parse_duration(asked)), (setting, asked, actual)
    if PREFIX + "port" in annotations:
        assert got.port == int(annotations[PREFIX + "port"])
        assert container["ports"][0]["containerPort"] == got.port
    url = annotations.get(PREFIX + "health-url")
    if url is not None:
        assert got.health is not None and got.health.url == url
    if annotations.get(PREFIX + "health-failures") and got.health is not None:
        assert got.health.policy.failures == int(annotations[PREFIX + "health-failures"])
    if PREFIX + "shards" in annotations:
        assert got.shards == int(annotations[PREFIX + "shards"])
    mounts = [m["mountPath"] for m in container["volumeMounts"]]
    assert str(got.state_dir) in mounts
    assert got.identity == "p" and got.lease.startswith("leader-")


def test_the_fuzzed_keys_are_every_setting_the_injector_knows() -> None:
    assert set(values) == set(KNOWN) - {PREFIX + "inject"}
