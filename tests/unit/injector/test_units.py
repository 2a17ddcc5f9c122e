"""Injector settings, webhook configuration, sweep rules and RBAC objects, without a cluster."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import io
import json
from typing import Any

import pytest

from sidecar.injector import rbac
from sidecar.injector.annotations import INJECT
from sidecar.injector.settings import SettingsError, build_parser, injector_settings
from sidecar.injector.sweep import sweep_cluster
from sidecar.injector.webhookconfig import (
    MATCH_EXPRESSION,
    NAMESPACE_WEBHOOK_NAME,
    OPT_OUT_EXPRESSION,
    WEBHOOK_NAME,
    ca_bundle_of,
    webhook_configuration,
)
from sidecar.kit.logs import Logger
from sidecar.kube.errors import ApiUnavailable, Conflict, NotFound
from sidecar.kube.sweep import Sightings

NOW = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)


def settings_of(*argv: str, env: dict[str, str] | None = None) -> Any:
    return injector_settings(build_parser().parse_args(["--sidecar-image=i", *argv]), env or {})


# ---- settings -------------------------------------------------------------------------


def test_defaults_match_the_contract() -> None:
    s = settings_of(env={"POD_NAMESPACE": "grelmicro-system"})
    assert (s.host, s.port, s.health_port) == ("0.0.0.0", 8443, 8080)
    assert str(s.tls_cert_file) == "/etc/grelmicro-sidecar/tls/tls.crt"
    assert str(s.tls_key_file) == "/etc/grelmicro-sidecar/tls/tls.key"
    assert s.sidecar.pull_policy == "IfNotPresent"
    assert (s.sidecar.cpu_request, s.sidecar.memory_request, s.sidecar.memory_limit) == (
        "10m",
        "32Mi",
        "64Mi",
    )
    t = s.sidecar.timing
    assert (t.lease_duration, t.renew_deadline, t.retry_period) == (15, 10, 2)
    assert s.excluded_namespaces == ("kube-system", "grelmicro-system")
    assert (s.sweep_interval, s.sweep_margin, s.auto_rbac, s.log_level) == (60, 60, False, "info")


def test_env_sets_each_flag_and_the_flag_wins() -> None:
    env = {
        "GRELMICRO_INJECTOR_PORT": "9443",
        "GRELMICRO_INJECTOR_SWEEP_INTERVAL": "0",
        "GRELMICRO_INJECTOR_AUTO_RBAC": "true",
        "GRELMICRO_INJECTOR_EXCLUDED_NAMESPACES": "a, b",
    }
    s = settings_of("--port=7443", env=env)
    assert (s.port, s.sweep_interval, s.auto_rbac) == (7443, 0, True)
    assert s.excluded_namespaces == ("a", "b")


@pytest.mark.parametrize(
    ("argv", "env", "needle"),
    [
        (["--port=0"], {}, "--port='0' is not valid; expected a port number"),
        ([], {"GRELMICRO_INJECTOR_HEALTH_PORT": "x"}, "GRELMICRO_INJECTOR_HEALTH_PORT='x'"),
        (["--sidecar-cpu-request=lots"], {}, "a Kubernetes quantity"),
        (
            ["--sidecar-image-pull-policy=Sometimes"],
            {},
            "expected one of Always, IfNotPresent, Never",
        ),
        (
            ["--lease-duration=5s"],
            {},
            "--lease-duration=5s must be greater than renew-deadline 10s (the default)",
        ),
        (["--sweep-interval=often"], {}, "or 0 to disable"),
        (["--sweep-margin=0"], {}, "--sweep-margin='0' is not valid; expected a duration such as"),
        (["--sweep-margin=1s"], {}, "expected a duration of at least 5s"),
        (["--excluded-namespaces=Kube_System"], {}, "comma-separated list of namespace names"),
        (["--auto-rbac=maybe"], {}, "true or false"),
        (["--log-level=loud"], {}, "expected one of debug, info, warning, error"),
    ],
)
def test_bad_values_name_the_flag_and_the_form(
    argv: list[str], env: dict[str, str], needle: str
) -> None:
    with pytest.raises(SettingsError) as err:
        settings_of(*argv, env=env)
    assert needle in str(err.value)


# ---- webhook configuration ------------------------------------------------------------


def test_webhook_configuration_shape() -> None:
    config = webhook_configuration(
        "Q0E=",
        url="https://127.0.0.1:8443/inject",
        excluded_namespaces=["ops", "kube-system", "ops"],
    )
    assert config["metadata"]["name"] == "grelmicro-sidecar-injector"
    by_annotation, by_namespace = config["webhooks"]
    assert (by_annotation["name"], by_namespace["name"]) == (WEBHOOK_NAME, NAMESPACE_WEBHOOK_NAME)
    assert by_annotation["clientConfig"] == {
        "caBundle": "Q0E=",
        "url": "https://127.0.0.1:8443/inject",
    }
    assert by_namespace["clientConfig"] == {
        "caBundle": "Q0E=",
        "url": "https://127.0.0.1:8443/inject-namespace",
    }
    names = {
        "key": "kubernetes.io/metadata.name",
        "operator": "NotIn",
        "values": ["kube-system", "ops"],
    }
    label = "leader-election.grelmicro.io/inject"
    # The two never both see a pod: a namespace is labelled enabled, or it is not.
    assert by_annotation["namespaceSelector"] == {
        "matchExpressions": [names, {"key": label, "operator": "NotIn", "values": ["enabled"]}]
    }
    assert by_namespace["namespaceSelector"] == {
        "matchExpressions": [names, {"key": label, "operator": "In", "values": ["enabled"]}]
    }
    assert by_annotation["matchConditions"][0]["expression"] == MATCH_EXPRESSION
    assert (
        "has(object.metadata.annotations)" in MATCH_EXPRESSION
        and f"'{INJECT}' in" in MATCH_EXPRESSION
        and "== 'true'" in MATCH_EXPRESSION
    )
    assert by_namespace["matchConditions"][0]["expression"] == OPT_OUT_EXPRESSION
    assert OPT_OUT_EXPRESSION.startswith("!(") and "== 'false'" in OPT_OUT_EXPRESSION
    for hook in (by_annotation, by_namespace):
        assert hook["rules"] == [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": ["pods"],
                "operations": ["CREATE"],
                "scope": "Namespaced",
            }
        ]
        assert (hook["failurePolicy"], hook["sideEffects"], hook["timeoutSeconds"]) == (
            "Fail",
            "None",
            10,
        )
        assert (hook["reinvocationPolicy"], hook["admissionReviewVersions"]) == ("IfNeeded", ["v1"])


def test_webhook_configuration_service_no_bundle_no_exclusions_and_its_settings() -> None:
    config = webhook_configuration(
        None,
        service={"namespace": "ops", "name": "inj"},
        excluded_namespaces=[],
        failure_policy="Ignore",
        timeout_seconds=3,
    )
    paths = []
    for hook in config["webhooks"]:
        assert "caBundle" not in hook["clientConfig"]  # the injector puts it there itself
        paths.append(hook["clientConfig"]["service"].pop("path"))
        assert hook["clientConfig"]["service"] == {"namespace": "ops", "name": "inj", "port": 443}
        # NotIn with no values is invalid: only the namespace label is selected on.
        assert len(hook["namespaceSelector"]["matchExpressions"]) == 1
        assert (hook["failurePolicy"], hook["timeoutSeconds"]) == ("Ignore", 3)
    assert paths == ["/inject", "/inject-namespace"]
    config = webhook_configuration(ca_bundle_of(b"pem"), service={"namespace": "a", "name": "b"})
    assert base64.b64decode(config["webhooks"][0]["clientConfig"]["caBundle"]) == b"pem"
    with pytest.raises(ValueError):
        webhook_configuration("x", excluded_namespaces=[])
    with pytest.raises(ValueError):
        webhook_configuration("x", url="u", service={"namespace": "a", "name": "b"})


# ---- sweep ----------------------------------------------------------------------------


def _lease(
    name: str,
    holder: str | None,
    renewed_ago: float | None,
    duration: int = 15,
    managed: bool = True,
    ns: str = "ns",
) -> dict[str, Any]:
    spec: dict[str, Any] = {"leaseDurationSeconds": duration}
    if holder is not None:
        spec["holderIdentity"] = holder
    if renewed_ago is not None:
        spec["renewTime"] = (NOW - dt.timedelta(seconds=renewed_ago)).strftime(
            "%Y-%m-%dT%H:%M:%S.%fZ"
        )
    labels = {"app.kubernetes.io/managed-by": "grelmicro"} if managed else {}
    return {
        "metadata": {
            "name": name,
            "namespace": ns,
            "resourceVersion": f"rv-{name}",
            "labels": labels,
        },
        "spec": spec,
    }


class FakeApi:
    def __init__(self, leases: list[dict[str, Any]], pods: set[tuple[str, str]]):
        self.leases = leases
        self.pods = pods
        self.deletes: list[tuple[str, str, str]] = []
        self.fail_delete: dict[str, Exception] = {}
        self.fail_pod: Exception | None = None

    async def list(self, label_selector: str = "", **_: Any) -> tuple[list[dict[str, Any]], str]:
        assert label_selector == "app.kubernetes.io/managed-by=grelmicro"
        return self.leases, "1"

    async def pod_exists(self, namespace: str, name: str) -> bool:
        if self.fail_pod is not None:
            raise self.fail_pod
        return (namespace, name) in self.pods

    async def delete(self, name: str, resource_version: str, *, namespace: str) -> None:
        if name in self.fail_delete:
            raise self.fail_delete[name]
        self.deletes.append((namespace, name, resource_version))


def _sweep(api: FakeApi, margin: float = 60, seen_for: float = 1000) -> Any:
    """One sweep by a replica that saw the same list ``seen_for`` seconds ago (its monotonic clock)."""
    deleted: list[str] = []
    log = Logger("info", stream=io.StringIO())
    clock = [0.0]
    sightings = Sightings(lambda: clock[0])
    sightings.record(api.leases)
    clock[0] = seen_for
    result = asyncio.run(
        sweep_cluster(
            api,  # type: ignore[arg-type]
            api.pod_exists,
            log,
            sightings=sightings,
            margin=margin,
            now=lambda: NOW,
            on_delete=lambda ns, r: deleted.append(r.name),
        )
    )
    return result, deleted, log.stream.getvalue()  # type: ignore[union-attr]


def test_sweep_rules() -> None:
    api = FakeApi(
        [
            _lease("gone", "ghost", 300),
            _lease("released", "", 300, duration=1),
            _lease("alive", "pod-a", 300),
            _lease("live", "ghost", 10),
            _lease("margin", "ghost", 70),  # expired 55 s ago: within the 60 s margin
            _lease("unlabelled", "ghost", 300, managed=False),
            _lease("unreadable", "ghost", None),
            _lease("other-ns", "pod-a", 300, ns="other"),  # pod-a lives in ns, not in other
        ],
        pods={("ns", "pod-a")},
    )
    result, seen, logs = _sweep(api)
    assert api.deletes == [
        ("ns", "gone", "rv-gone"),
        ("ns", "released", "rv-released"),
        ("other", "other-ns", "rv-other-ns"),
    ]
    assert seen == ["gone", "released", "other-ns"]
    assert (result.kept_needed, result.kept_live, result.kept_unreadable) == (1, 2, 1)
    lines = [json.loads(line) for line in logs.splitlines()]
    assert [
        line["lease"] for line in lines if line["msg"] == "sweep: deleted expired lease"
    ] == seen


def test_sweep_keeps_what_changed_or_cannot_be_checked() -> None:
    api = FakeApi([_lease("renewed", "ghost", 300), _lease("gone", "ghost", 300)], pods=set())
    api.fail_delete = {"renewed": Conflict("409", status=409), "gone": NotFound("404", status=404)}
    result, seen, _ = _sweep(api)
    assert seen == [] and result.skipped_changed == 2

    api = FakeApi([_lease("unknown-holder", "ghost", 300)], pods=set())
    api.fail_pod = ApiUnavailable("down")
    result, seen, logs = _sweep(api)
    assert seen == [] and api.deletes == [] and result.errors == 1
    assert "keeping it" in logs


def test_sweep_judges_on_what_it_saw_not_on_any_wall_clock() -> None:
    # Both look expired by ten minutes on this clock; only one stayed unchanged.
    moving, still = _lease("moving", "ghost", 600), _lease("still", "ghost", 600)
    api = FakeApi([moving, still], pods=set())
    clock = [0.0]
    sightings = Sightings(lambda: clock[0])
    log = Logger("info", stream=io.StringIO())

    def sweep_at(t: float) -> Any:
        clock[0] = t
        return asyncio.run(
            sweep_cluster(
                api,  # type: ignore[arg-type]
                api.pod_exists,
                log,
                sightings=sightings,
                margin=10,
                now=lambda: NOW,
            )
        )

    first = sweep_at(0)  # first sight: nothing is confirmed yet
    assert api.deletes == [] and first.kept_unconfirmed == 2 and first.confirm_in == 25
    for t in (10, 20):  # a holder whose clock runs behind renews: the version moves
        moving["metadata"]["resourceVersion"] = f"rv-moving-{t}"
        assert sweep_at(t).kept_unconfirmed == 2
    assert api.deletes == []
    assert sweep_at(24.9).kept_unconfirmed == 2  # 15 s duration + 10 s margin not yet over
    fourth = sweep_at(25)
    assert api.deletes == [("ns", "still", "rv-still")]
    assert fourth.kept_unconfirmed == 1 and fourth.confirm_in == 20  # moving: seen since t=20
    api.leases = [moving]  # still is gone
    assert sweep_at(44.9).kept_unconfirmed == 1
    sweep_at(45)  # moving stopped at t=20: now it is abandoned too
    assert api.deletes[1:] == [("ns", "moving", "rv-moving-20")]


# ---- rbac ---------------------------------------------------------------------------------


def test_rbac_objects_grant_exactly_the_lease_and_event_verbs() -> None:
    role = rbac.role("ns")
    assert role["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        },
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
        # At shutdown: is this pod being deleted (its app stopped first)? Contract §5.
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
    ]
    binding = rbac.role_binding("ns", "app")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "app", "namespace": "ns"}]


# ---- the AdmissionReview answer ---------------------------------------------------------


def _review_of(pod: Any, operation: str = "CREATE", resource: str = "pods") -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "resource": {"group": "", "version": "v1", "resource": resource},
            "operation": operation,
            "object": pod,
        },
    }


def test_review_answers_with_a_base64_json_patch() -> None:
    from sidecar.injector.patch import SidecarSpec, decide
    from sidecar.injector.review import answer

    pod = {
        "metadata": {"name": "p", "annotations": {INJECT: "true"}},
        "spec": {"containers": [{"name": "a"}]},
    }
    response, decision = answer(_review_of(pod), SidecarSpec(image="i"))
    body = response["response"]
    assert response["apiVersion"] == "admission.k8s.io/v1" and body["uid"] == "u-1"
    assert body["allowed"] is True and body["patchType"] == "JSONPatch"
    assert (
        json.loads(base64.b64decode(body["patch"]))
        == decide(pod, SidecarSpec(image="i")).json_patch()
    )
    assert decision is not None and decision.outcome == "injected"


def test_review_denial_and_odd_requests() -> None:
    from sidecar.injector.patch import SidecarSpec
    from sidecar.injector.review import answer

    spec = SidecarSpec(image="i")
    bad = {
        "metadata": {
            "name": "p",
            "annotations": {INJECT: "true", "leader-election.grelmicro.io/port": "x"},
        },
        "spec": {"containers": [{"name": "a"}]},
    }
    body = answer(_review_of(bad), spec)[0]["response"]
    assert body["allowed"] is False and body["status"]["code"] == 400
    assert "leader-election.grelmicro.io/port" in body["status"]["message"]
    assert answer(_review_of(bad, operation="UPDATE"), spec)[0]["response"] == {
        "uid": "u-1",
        "allowed": True,
    }
    assert answer(_review_of(bad, resource="services"), spec)[0]["response"]["allowed"] is True
    in_excluded = _review_of(bad)
    in_excluded["request"]["namespace"] = "kube-system"
    response, decision = answer(in_excluded, spec, excluded_namespaces=("kube-system",))
    assert response["response"] == {"uid": "u-1", "allowed": True}
    assert decision is not None and decision.outcome == "skipped"
    for garbage in (
        None,
        [],
        {"request": None},
        {
            "request": {
                "uid": 1,
                "operation": "CREATE",
                "resource": {"group": "", "resource": "pods"},
                "object": "x",
            }
        },
    ):
        response, _ = answer(garbage, spec)
        assert (
            response["response"]["allowed"] is False
            and response["response"]["status"]["code"] == 400
        )
