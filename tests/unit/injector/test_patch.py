"""The pure pod patch builder: what an injected pod gets, defaults, conflicts, idempotency."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from sidecar.core.timing import Timing
from sidecar.injector.annotations import default_election, read_settings
from sidecar.injector.patch import (
    ACK_VOLUME,
    CONTAINER_NAME,
    VOLUME_NAME,
    SidecarSpec,
    decide,
)
from tests.patched import patched

P = "leader-election.grelmicro.io/"
SPEC = SidecarSpec(image="img:1")


def pod(annotations: dict[str, str] | None = None, **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"annotations": {P + "inject": "true", **(annotations or {})}, **meta},
        "spec": {"containers": [{"name": "app", "image": "busybox"}]},
    }


def test_injects_a_native_sidecar_first_with_everything_spelled_out() -> None:
    p = pod(name="solo")
    p["spec"]["initContainers"] = [{"name": "migrate", "image": "m"}]
    decision = decide(p, SPEC)
    assert decision.outcome == "injected"
    out = patched(p, decision)
    inits = out["spec"]["initContainers"]
    assert [c["name"] for c in inits] == [CONTAINER_NAME, "migrate"]
    sc = inits[0]
    assert sc["restartPolicy"] == "Always"
    assert sc["args"][:2] == ["run", "--election=solo"]
    assert "readinessProbe" not in sc
    assert out["spec"]["volumes"] == [
        {"name": VOLUME_NAME, "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
        {"name": ACK_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
    ]
    app = out["spec"]["containers"][0]
    assert app["volumeMounts"] == [
        {"name": VOLUME_NAME, "mountPath": "/var/run/leader-election", "readOnly": True},
        {"name": ACK_VOLUME, "mountPath": "/var/run/leader-election-ack"},
    ]
    assert {e["name"]: e["value"] for e in app["env"]} == {
        "LEADER_ELECTION_STATE_FILE": "/var/run/leader-election/state.json",
        "LEADER_ELECTION_URL": "http://127.0.0.1:4040/leader",
        "LEADER_ELECTION_ACK_FILE": "/var/run/leader-election-ack/drained",
        "LEADER_ELECTION_DRAINED_URL": "http://127.0.0.1:4040/drained",
    }
    # The sidecar reads the acknowledgement where the app writes it, and cannot write there.
    assert "--ack-file=/var/run/leader-election-ack/drained" in sc["args"]
    assert {"name": ACK_VOLUME, "mountPath": "/var/run/leader-election-ack", "readOnly": True} in (
        sc["volumeMounts"]
    )
    assert "volumeMounts" not in out["spec"]["initContainers"][1]  # regular init containers


def test_second_decision_changes_nothing_and_a_late_container_is_completed() -> None:
    p = pod(name="x")
    once = patched(p, decide(p, SPEC))
    assert decide(once, SPEC).outcome == "unchanged"
    once["spec"]["containers"].append({"name": "late", "image": "l"})  # another webhook added it
    again = decide(once, SPEC)
    assert again.outcome == "completed"
    assert set(again.changes) == {"/spec/containers"}
    twice = patched(once, again)
    names = [c["name"] for c in twice["spec"]["initContainers"] + twice["spec"]["containers"]]
    assert names.count(CONTAINER_NAME) == 1
    assert any(m["name"] == VOLUME_NAME for m in twice["spec"]["containers"][1]["volumeMounts"])


def test_app_env_the_pod_already_sets_wins() -> None:
    p = pod(name="x")
    p["spec"]["containers"][0]["env"] = [{"name": "LEADER_ELECTION_URL", "value": "mine"}]
    out = patched(p, decide(p, SPEC))
    env = out["spec"]["containers"][0]["env"]
    assert [e["name"] for e in env] == [
        "LEADER_ELECTION_URL",
        "LEADER_ELECTION_STATE_FILE",
        "LEADER_ELECTION_ACK_FILE",
        "LEADER_ELECTION_DRAINED_URL",
    ]
    assert env[0]["value"] == "mine"


def test_not_asked_is_skipped() -> None:
    for value in (None, "false", "True", "yes", ""):
        p = pod(name="x")
        if value is None:
            del p["metadata"]["annotations"][P + "inject"]
        else:
            p["metadata"]["annotations"][P + "inject"] = value
        assert decide(p, SPEC).outcome == "skipped"


def test_gate_readiness_adds_the_leader_probe() -> None:
    out = patched(
        pod({P + "gate-readiness": "true"}, name="x"),
        decide(pod({P + "gate-readiness": "true"}, name="x"), SPEC),
    )
    assert out["spec"]["initContainers"][0]["readinessProbe"]["httpGet"]["path"] == "/leader"


def test_label_leader_passes_the_flag_and_pod_name() -> None:
    annotated = pod({P + "label-leader": "true"}, name="x")
    sc = patched(annotated, decide(annotated, SPEC))["spec"]["initContainers"][0]
    assert "--label-leader" in sc["args"]
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in sc[
        "env"
    ]
    plain = pod({}, name="x")
    assert (
        "--label-leader"
        not in patched(plain, decide(plain, SPEC))["spec"]["initContainers"][0]["args"]
    )


def test_shards_pass_the_flag_and_tell_the_app_where_to_ask() -> None:
    annotated = pod({P + "shards": "12"}, name="x")
    out = patched(annotated, decide(annotated, SPEC))
    sc, app = out["spec"]["initContainers"][0], out["spec"]["containers"][0]
    assert "--shards=12" in sc["args"]
    assert not any(a.startswith("--ack-file") for a in sc["args"])  # one file names no shard
    env = {e["name"]: e["value"] for e in app["env"]}
    assert env["LEADER_ELECTION_SHARDS"] == "12"
    assert env["LEADER_ELECTION_SHARDS_URL"] == "http://127.0.0.1:4040/shards"
    assert "LEADER_ELECTION_ACK_FILE" not in env
    one = pod({P + "shards": "1"}, name="x")
    sc = patched(one, decide(one, SPEC))["spec"]["initContainers"][0]
    assert not any(a.startswith("--shards") for a in sc["args"])


@pytest.mark.parametrize(
    ("annotations", "said"),
    [
        ({P + "shards": "65"}, "from 1 to 64"),
        ({P + "shards": "¹"}, "from 1 to 64"),
        ({P + "shards": "3", P + "gate-readiness": "true"}, "probe /shards/<i>"),
        ({P + "shards": "3", P + "label-leader": "true"}, "every pod may own some"),
        ({P + "shards": "3", P + "health-url": "http://127.0.0.1:8080/h"}, "not supported yet"),
    ],
)
def test_shards_refuse_what_they_cannot_do(annotations: dict[str, str], said: str) -> None:
    decision = decide(pod(annotations, name="x"), SPEC)
    assert decision.outcome == "denied" and said in str(decision), decision


def test_injector_defaults_apply_and_annotations_override() -> None:
    spec = SidecarSpec(image="i", timing=Timing(30, 20, 4), cpu_request="5m")
    p = pod({P + "retry-period": "5s"}, name="x")
    sc = patched(p, decide(p, spec))["spec"]["initContainers"][0]
    assert sc["args"][2:5] == ["--lease-duration=30s", "--renew-deadline=20s", "--retry-period=5s"]
    assert sc["resources"]["requests"]["cpu"] == "5m"


@pytest.mark.parametrize(
    ("meta", "expected"),
    [
        (
            {
                "generateName": "web-7d4b9c-",
                "labels": {"pod-template-hash": "7d4b9c", "app.kubernetes.io/name": "lbl"},
                "ownerReferences": [
                    {"kind": "ReplicaSet", "name": "web-7d4b9c", "controller": True}
                ],
            },
            ("web", "Deployment"),
        ),
        (
            {
                "generateName": "db-",
                "ownerReferences": [
                    {"kind": "Foo", "name": "other"},
                    {"kind": "StatefulSet", "name": "db", "controller": True},
                ],
            },
            ("db", "StatefulSet"),
        ),
        (
            {"ownerReferences": [{"kind": "Job", "name": "Batch_Run", "controller": True}]},
            ("batch-run", "Job"),
        ),
        (
            {"ownerReferences": [{"kind": "ReplicaSet", "name": "bare-rs", "controller": True}]},
            ("bare-rs", "ReplicaSet"),
        ),
        (
            {"labels": {"app.kubernetes.io/name": "My.App"}, "generateName": "g-"},
            ("my-app", "label app.kubernetes.io/name"),
        ),
        ({"generateName": "worker-"}, ("worker", "generateName")),
        ({"generateName": "---", "name": "pod-1"}, ("pod-1", "pod name")),
        ({}, None),
    ],
)
def test_default_election_name(meta: dict[str, Any], expected: tuple[str, str] | None) -> None:
    assert default_election({"metadata": meta}) == expected


def test_annotation_name_wins_and_is_sanitised() -> None:
    settings = read_settings(pod({P + "name": "Orders/Main"}, generateName="x-"), Timing())
    assert not isinstance(settings, list)
    assert (settings.election, settings.election_source) == ("orders-main", "annotation")


def test_no_name_at_all_is_denied_with_the_fix() -> None:
    p = pod()
    decision = decide(p, SPEC)
    assert decision.outcome == "denied"
    assert P + "name" in decision.message


def test_every_problem_is_reported_at_once() -> None:
    p = pod({P + "port": "x", P + "gate-readiness": "maybe", P + "retry-period": "soon"}, name="n")
    message = decide(p, SPEC).message
    for key, value in (("port", "x"), ("gate-readiness", "maybe"), ("retry-period", "soon")):
        assert f'{P}{key}: "{value}" is not valid; expected' in message


def test_timing_rule_names_where_each_value_came_from() -> None:
    message = decide(pod({P + "renew-deadline": "20s"}, name="n"), SPEC).message
    assert (
        f'{P}renew-deadline="20s"' in message
        and "lease-duration 15s (the injector's default" in message
    )


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (
            lambda s: s["volumes"].append({"name": VOLUME_NAME, "emptyDir": {}}),
            "already has a volume",
        ),
        (
            lambda s: s["containers"][0].update(
                volumeMounts=[{"name": "data", "mountPath": "/var/run/leader-election/"}]
            ),
            f"set annotation {P}state-dir",
        ),
        (
            lambda s: s["volumes"].append({"name": ACK_VOLUME, "emptyDir": {}}),
            f"already has a volume named '{ACK_VOLUME}'",
        ),
        (
            lambda s: s["containers"][0].update(
                volumeMounts=[{"name": "data", "mountPath": "/var/run/leader-election-ack"}]
            ),
            "where the sidecar's ack directory goes",
        ),
        (
            lambda s: s["containers"][0].update(ports=[{"containerPort": 4040}]),
            f"set annotation {P}port",
        ),
    ],
)
def test_conflicts_are_denied_with_the_fix(change: Any, needle: str) -> None:
    p = pod(name="x")
    p["spec"]["volumes"] = []
    change(p["spec"])
    decision = decide(p, SPEC)
    assert decision.outcome == "denied" and needle in decision.message


def test_an_existing_sidecar_is_never_duplicated() -> None:
    p = pod(name="x")
    p["spec"]["containers"].append({"name": CONTAINER_NAME, "image": "hand-made"})
    out = patched(p, decide(p, SPEC))
    names = [c["name"] for c in out["spec"].get("initContainers", []) + out["spec"]["containers"]]
    assert names.count(CONTAINER_NAME) == 1
    assert out["spec"]["containers"][1] == {"name": CONTAINER_NAME, "image": "hand-made"}


def test_decide_does_not_mutate_its_input() -> None:
    p = pod(name="x")
    before = copy.deepcopy(p)
    decide(p, SPEC)
    assert p == before


# ---- the sidecar's user, and namespaces that opt in ---------------------------------


def _sidecar(p: dict[str, Any], opted_in: bool = False) -> dict[str, Any]:
    out = patched(p, decide(p, SPEC, opted_in))
    sidecar: dict[str, Any] = out["spec"]["initContainers"][0]
    assert sidecar["name"] == CONTAINER_NAME
    return sidecar


@pytest.mark.parametrize(
    ("pod_context", "expected"),
    [
        ({}, {}),  # the image's own user (65532), or the one a namespace policy assigns
        ({"runAsUser": 1000700000, "runAsGroup": 1000700000}, {}),  # the pod's, inherited
        ({"runAsUser": 0}, {"runAsUser": 65532}),  # never root: runAsNonRoot would refuse it
        ({"runAsUser": 0, "runAsGroup": 0}, {"runAsUser": 65532, "runAsGroup": 65532}),
        ({"runAsUser": 1000, "runAsGroup": 0}, {"runAsGroup": 65532}),
    ],
)
def test_the_sidecar_runs_as_the_pods_user_and_names_one_only_instead_of_root(
    pod_context: dict[str, int], expected: dict[str, int]
) -> None:
    p = pod(name="p")
    p["spec"]["securityContext"] = pod_context
    context = _sidecar(p)["securityContext"]
    assert context["runAsNonRoot"] is True
    assert {k: context[k] for k in ("runAsUser", "runAsGroup") if k in context} == expected


def test_an_opted_in_namespace_injects_pods_without_the_annotation_and_skips_false() -> None:
    plain = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "app"}]}}
    assert decide(plain, SPEC).outcome == "skipped"
    assert decide(plain, SPEC, opted_in=True).outcome == "injected"
    assert _sidecar(plain, opted_in=True)["args"][:2] == ["run", "--election=p"]
    out = pod({P + "inject": "false"}, name="p")
    assert decide(out, SPEC, opted_in=True).outcome == "skipped"
    assert decide(pod(name="p"), SPEC, opted_in=True).outcome == "injected"
    odd = decide(pod({P + "inject": "yes"}, name="p"), SPEC, opted_in=True)
    assert odd.outcome == "denied"
    assert odd.message == (
        'annotation leader-election.grelmicro.io/inject: "yes" is not valid in a namespace '
        'labelled leader-election.grelmicro.io/inject=enabled; expected "true" or "false" '
        "(to leave this pod without the sidecar)"
    )
    # Outside an opted-in namespace an odd value is no request at all, as before.
    assert decide(pod({P + "inject": "yes"}, name="p"), SPEC).outcome == "skipped"


def test_health_annotations_become_the_sidecars_flags() -> None:
    """Each health annotation is the flag of its name, checked as the flag is; health-file
    has the app touch a file in its ack directory, which the sidecar can read."""
    p = pod(
        {
            P + "health-url": "http://127.0.0.1:8080/healthz",
            P + "health-period": "1s",
            P + "when-none-healthy": "nobody",
        },
        name="x",
    )
    sc = patched(p, decide(p, SPEC))["spec"]["initContainers"][0]
    assert sc["args"][-3:] == [
        "--health-url=http://127.0.0.1:8080/healthz",
        "--health-period=1s",
        "--when-none-healthy=nobody",
    ]
    p = pod({P + "health-file": "true"}, name="x")
    out = patched(p, decide(p, SPEC))
    assert (
        "--health-file=/var/run/leader-election-ack/healthy"
        in (out["spec"]["initContainers"][0]["args"])
    )
    env = {e["name"]: e["value"] for e in out["spec"]["containers"][0]["env"]}
    assert env["LEADER_ELECTION_HEALTH_FILE"] == "/var/run/leader-election-ack/healthy"


@pytest.mark.parametrize(
    ("notes", "needle"),
    [
        ({"health-url": "http://10.0.0.1/healthz"}, "an http:// URL on loopback"),
        ({"health-failures": "0"}, "a whole number from 1 to 100"),
        ({"health-period": "2s"}, "or they follow nothing"),
        ({"health-url": "http://127.0.0.1/h", "health-file": "true"}, "keep one"),
        ({"when-none-healthy": "maybe"}, "one of keep, nobody"),
    ],
)
def test_bad_health_annotations_are_denied_with_the_fix(notes: dict[str, str], needle: str) -> None:
    p = pod({P + k: v for k, v in notes.items()}, name="x")
    decision = decide(p, SPEC)
    assert decision.outcome == "denied" and needle in decision.message, decision.message
