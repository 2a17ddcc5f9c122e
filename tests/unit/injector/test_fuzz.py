"""Fuzzing the annotations and pod shapes: never raises; a clear denial or a valid, idempotent patch."""

from __future__ import annotations

from typing import Any

import jsonpatch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sidecar.injector.annotations import KNOWN, PREFIX
from sidecar.injector.patch import CONTAINER_NAME, VOLUME_NAME, SidecarSpec, _decide
from tests.patched import patched

SPEC = SidecarSpec(image="img:1")

plausible = st.sampled_from(
    [
        "true",
        "false",
        "True",
        "",
        "0",
        "15s",
        "10s",
        "2s",
        "1m",
        "1500ms",
        "-1s",
        "0s",
        "4040",
        "65536",
        "/var/run/x",
        "/",
        "relative",
        "/a/../b",
        "main",
        "---",
        "x" * 300,
        "1h",
        "25h",
    ]
)
values = st.one_of(plausible, st.text(max_size=40))
keys = st.one_of(
    st.sampled_from(KNOWN), st.text(max_size=12).map(lambda s: PREFIX + s), st.text(max_size=20)
)
annotations = st.dictionaries(keys, values, max_size=6).map(
    lambda d: {**d, PREFIX + "inject": d.get(PREFIX + "inject", "true")}
)
names = st.text(alphabet="abcdefghij-XYZ_.0123", max_size=15)
garbage = st.one_of(
    st.none(), st.integers(), st.text(max_size=5), st.lists(st.integers(), max_size=2)
)
container = st.fixed_dictionaries(
    {"name": names},
    optional={
        "ports": st.one_of(
            garbage,
            st.lists(st.fixed_dictionaries({"containerPort": st.integers(0, 70000)}), max_size=2),
        ),
        "volumeMounts": st.one_of(
            garbage,
            st.lists(
                st.fixed_dictionaries(
                    {
                        "name": names,
                        "mountPath": st.sampled_from(["/var/run/leader-election", "/data", "/x/"]),
                    }
                ),
                max_size=2,
            ),
        ),
        "env": st.one_of(garbage, st.lists(st.fixed_dictionaries({"name": names}), max_size=2)),
    },
)
owner = st.fixed_dictionaries(
    {"kind": st.sampled_from(["ReplicaSet", "StatefulSet", "Job", "Other"]), "name": names},
    optional={"controller": st.booleans()},
)
metadata = st.fixed_dictionaries(
    {"annotations": st.one_of(annotations, garbage)},
    optional={
        "name": names,
        "generateName": names,
        "labels": st.one_of(
            garbage,
            st.dictionaries(
                st.sampled_from(["pod-template-hash", "app.kubernetes.io/name", "x"]), names
            ),
        ),
        "ownerReferences": st.one_of(garbage, st.lists(st.one_of(owner, garbage), max_size=2)),
    },
)
spec = st.fixed_dictionaries(
    {"containers": st.one_of(st.lists(st.one_of(container, garbage), max_size=3), garbage)},
    optional={
        "initContainers": st.lists(container, max_size=2),
        "volumes": st.one_of(garbage, st.lists(st.fixed_dictionaries({"name": names}), max_size=2)),
    },
)
pods = st.fixed_dictionaries(
    {"metadata": st.one_of(metadata, garbage), "spec": st.one_of(spec, garbage)}
)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pods)
def test_never_raises_and_always_decides_clearly(pod: dict[str, Any]) -> None:
    decision = _decide(pod, SPEC)  # the inner function: a bug must show, not become a denial
    assert decision.outcome in ("injected", "completed", "unchanged", "skipped", "denied")
    if decision.outcome == "denied":
        assert decision.message and "Traceback" not in decision.message
        notes = pod["metadata"]["annotations"]
        for key in notes:
            if key.startswith(PREFIX) and key not in KNOWN:
                assert key in decision.message
        return
    if decision.outcome in ("skipped", "unchanged"):
        assert not decision.changes
        return
    out = patched(pod, decision)
    assert jsonpatch.apply_patch(pod, decision.json_patch()) == out
    again = _decide(out, SPEC)
    assert again.outcome == "unchanged", again  # idempotent
    spec_out = out["spec"]
    everything = [c for c in spec_out.get("initContainers", []) + spec_out["containers"]]
    assert [c.get("name") for c in everything if isinstance(c, dict)].count(CONTAINER_NAME) == 1
    assert [v.get("name") for v in spec_out["volumes"] if isinstance(v, dict)].count(
        VOLUME_NAME
    ) == 1


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(KNOWN), values, max_size=7))
def test_each_bad_value_is_named_with_its_annotation(notes: dict[str, str]) -> None:
    notes = {**notes, PREFIX + "inject": "true"}
    pod = {"metadata": {"name": "p", "annotations": notes}, "spec": {"containers": [{"name": "a"}]}}
    decision = _decide(pod, SPEC)
    if decision.outcome == "denied":
        assert PREFIX in decision.message
        assert decision.message.count("annotation") + decision.message.count(PREFIX) >= 1
    else:
        assert decision.outcome == "injected"
        args = patched(pod, decision)["spec"]["initContainers"][0]["args"]
        assert args[0] == "run" and args[1].startswith("--election=")
