"""The pod mutation: what injecting the sidecar changes in a Pod (contract §6, §8).

Pure: a pod (the ``object`` of an AdmissionReview) and the sidecar's settings
in, a ``Decision`` out. ``decide`` never raises; what it cannot accept becomes a
denial naming what to change. The sidecar is a native sidecar (the first init
container, ``restartPolicy: Always``), so the app stops before the Lease is
released; its settings are spelled out as flags, readable in the pod's YAML.

Idempotent: a pod that already has a container named ``grelmicro-sidecar`` is
never given a second one; only app containers lacking a mount or the env
(added by a later webhook) are completed, and deciding again yields no change.

Two volumes: the state directory (read-only to the app) and, beside it, the
ack directory, the one place the app writes (a drain's acknowledgement,
contract §4), read-only to the sidecar.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..core.durations import format_duration
from ..core.timing import Timing
from .annotations import (
    INJECT,
    NAMESPACE_ENABLED,
    NAMESPACE_LABEL,
    PORT,
    STATE_DIR,
    PodSettings,
    annotations_of,
    read_settings,
    show,
)

CONTAINER_NAME = "grelmicro-sidecar"
VOLUME_NAME = "leader-election"
ACK_VOLUME = "leader-election-ack"
PORT_NAME = "leader-http"
#: The image's own ``USER 65532:65532`` (the Dockerfile). The sidecar names no UID or GID of
#: its own (contract §8): it runs as the pod's, as one a namespace policy assigns at
#: admission (OpenShift's UID ranges), or else as the image's. Only in a pod that runs as
#: root is it named, since ``runAsNonRoot`` refuses root.
RUN_AS = 65532


@dataclass(frozen=True)
class SidecarSpec:
    """What the injector puts in every sidecar (its flags), and the timing defaults."""

    image: str
    pull_policy: str = "IfNotPresent"
    cpu_request: str = "10m"
    memory_request: str = "32Mi"
    memory_limit: str = "64Mi"
    timing: Timing = field(default_factory=Timing)


@dataclass(frozen=True)
class Decision:
    """``changes`` maps a JSON pointer to its new value; ``message`` says what to fix when
    ``denied``; ``skipped``: no ``inject: "true"``; ``unchanged``: the pod has everything."""

    outcome: Literal["injected", "completed", "unchanged", "skipped", "denied"]
    changes: dict[str, Any] = field(default_factory=dict)
    message: str = ""
    settings: PodSettings | None = None

    def json_patch(self) -> list[dict[str, Any]]:
        """RFC 6902 ops; ``add`` replaces an existing member, so it fits both cases."""
        return [{"op": "add", "path": path, "value": value} for path, value in self.changes.items()]


def _list(spec: Mapping[str, Any], key: str) -> list[Any]:
    value = spec.get(key)
    return list(value) if isinstance(value, list) else []


def _dicts(items: Any) -> list[Mapping[str, Any]]:
    return [i for i in items if isinstance(i, Mapping)] if isinstance(items, list) else []


def _name(container: Any) -> str:
    return str(container.get("name", "")) if isinstance(container, Mapping) else ""


def _probe(path: str, period: int, failures: int, timeout: int, **more: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": PORT_NAME},
        "periodSeconds": period,
        "failureThreshold": failures,
        **more,
        "timeoutSeconds": timeout,
    }


def identity(pod_spec: Mapping[str, Any]) -> dict[str, int]:
    """The sidecar's ``runAsUser``/``runAsGroup``: none, unless the pod runs as root (or
    group root), which the sidecar's ``runAsNonRoot`` would refuse (module docstring)."""
    context = pod_spec.get("securityContext")
    context = context if isinstance(context, Mapping) else {}
    return {key: RUN_AS for key in ("runAsUser", "runAsGroup") if context.get(key) == 0}


def sidecar_container(
    settings: PodSettings, spec: SidecarSpec, pod_spec: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    timing = settings.timing
    # fmt: off
    container: dict[str, Any] = {
        "name": CONTAINER_NAME, "image": spec.image, "imagePullPolicy": spec.pull_policy,
        "restartPolicy": "Always",
        "args": [
            "run",
            f"--election={settings.election}",
            f"--lease-duration={format_duration(timing.lease_duration)}",
            f"--renew-deadline={format_duration(timing.renew_deadline)}",
            f"--retry-period={format_duration(timing.retry_period)}",
            f"--state-dir={settings.state_dir}",
            f"--port={settings.port}",
            *([f"--ack-file={settings.ack_file}"] if settings.shards == 1 else []),
            *([f"--shards={settings.shards}"] if settings.shards > 1 else []),
            *settings.health_args,
            *(["--label-leader"] if settings.label_leader else []),
        ],
        "env": [
            {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}
            for name, path in (("POD_NAME", "metadata.name"), ("POD_NAMESPACE", "metadata.namespace"))
        ],
        "ports": [{"name": PORT_NAME, "containerPort": settings.port, "protocol": "TCP"}],
        "startupProbe": _probe("/healthz", period=1, failures=30, timeout=1),
        "livenessProbe": _probe("/healthz", period=10, failures=3, timeout=2),
        "resources": {"requests": {"cpu": spec.cpu_request, "memory": spec.memory_request},
                      "limits": {"memory": spec.memory_limit}},
        "securityContext": {
            "runAsNonRoot": True, **identity(pod_spec or {}),
            "readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [
            {"name": VOLUME_NAME, "mountPath": settings.state_dir},
            {"name": ACK_VOLUME, "mountPath": settings.ack_dir, "readOnly": True},
        ],
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    # fmt: on
    if settings.gate_readiness:
        container["readinessProbe"] = _probe(
            "/leader", period=2, failures=1, timeout=1, successThreshold=1
        )
    return container


def _app_mounts(settings: PodSettings) -> list[dict[str, Any]]:
    """What an app container mounts: the state, read-only; the ack directory, to write."""
    return [
        {"name": VOLUME_NAME, "mountPath": settings.state_dir, "readOnly": True},
        {"name": ACK_VOLUME, "mountPath": settings.ack_dir},
    ]


def _completed(container: Any, settings: PodSettings) -> dict[str, Any] | None:
    """An app container with the mounts and the env added; None when it has them all (or is
    not an app container)."""
    if not isinstance(container, Mapping) or _name(container) == CONTAINER_NAME:
        return None
    mounts, env = _dicts(container.get("volumeMounts")), _dicts(container.get("env"))
    names = {str(e.get("name")) for e in env}
    mounted = {m.get("name") for m in mounts}
    missing_mounts = [m for m in _app_mounts(settings) if m["name"] not in mounted]
    url = f"http://127.0.0.1:{settings.port}"
    sharded = {
        "LEADER_ELECTION_SHARDS": str(settings.shards),
        "LEADER_ELECTION_SHARDS_URL": f"{url}/shards",
    }
    wanted = {
        "LEADER_ELECTION_STATE_FILE": settings.state_file,
        "LEADER_ELECTION_URL": f"{url}/leader",
        **({"LEADER_ELECTION_ACK_FILE": settings.ack_file} if settings.shards == 1 else sharded),
        "LEADER_ELECTION_DRAINED_URL": f"{url}/drained",
        **({"LEADER_ELECTION_HEALTH_FILE": settings.health_file} if settings.health_file else {}),
    }  # a value the pod already sets wins
    missing_env = [{"name": k, "value": v} for k, v in wanted.items() if k not in names]
    if not missing_mounts and not missing_env:
        return None
    out = dict(container)
    if missing_mounts:
        out["volumeMounts"] = [*mounts, *missing_mounts]
    if missing_env:
        out["env"] = [*env, *missing_env]
    return out


def _conflicts(settings: PodSettings, containers: list[Any], taken: list[str]) -> list[str]:
    """What in the pod would make the injected one fail to be accepted or to run."""
    problems = [
        f"the pod already has a volume named {name!r} (the injector adds its own); "
        "rename that volume"
        for name in taken
    ]
    ours = {settings.state_dir: "state directory", settings.ack_dir: "ack directory"}
    for c in _dicts(containers):
        for m in _dicts(c.get("volumeMounts")):
            path = str(m.get("mountPath", "")).rstrip("/") or "/"
            if path in ours:
                problems.append(
                    f"container {_name(c)!r} already mounts {m.get('name')!r} at "
                    f"{path}, where the sidecar's {ours[path]} goes; "
                    f"set annotation {STATE_DIR} to another path"
                )
        for p in _dicts(c.get("ports")):
            if p.get("containerPort") == settings.port and p.get("protocol", "TCP") == "TCP":
                problems.append(
                    f"container {_name(c)!r} declares port {settings.port}, which the sidecar "
                    f"would listen on; set annotation {PORT} to a free port, "
                    f"such as {show(str(4041 if settings.port == 4040 else 4040))}"
                )
    return problems


def decide(pod: Mapping[str, Any], spec: SidecarSpec, opted_in: bool = False) -> Decision:
    """Inject, complete, leave alone, skip or deny; never raises.

    ``opted_in``: the pod's namespace asks for every pod (its label, contract §6), so a pod
    without the ``inject`` annotation is injected, and one with ``inject: "false"`` skipped.
    """
    try:
        return _decide(pod, spec, opted_in)
    except Exception as err:  # pragma: no cover - a bug must deny clearly, not 500
        return Decision(
            "denied",
            message=f"the injector could not process this pod ({type(err).__name__}: {err}); "
            "please report this with the pod manifest",
        )


def _decide(pod: Mapping[str, Any], spec: SidecarSpec, opted_in: bool = False) -> Decision:
    if not isinstance(pod, Mapping):
        return Decision("skipped")
    asked = annotations_of(pod).get(INJECT, "true" if opted_in else None)
    if asked != "true":
        if asked is None or asked == "false" or not opted_in:
            return Decision("skipped")
        return Decision(
            "denied",
            message=f"annotation {INJECT}: {show(asked)} is not valid in a namespace labelled "
            f'{NAMESPACE_LABEL}={NAMESPACE_ENABLED}; expected "true" or "false" (to leave '
            "this pod without the sidecar)",
        )
    settings = read_settings(pod, spec.timing)
    if isinstance(settings, list):
        return Decision("denied", message="; ".join(settings))

    raw_spec = pod.get("spec")
    pod_spec: Mapping[str, Any] = raw_spec if isinstance(raw_spec, Mapping) else {}
    containers = _list(pod_spec, "containers")
    if not _dicts(containers):
        # The API server would refuse it anyway; say so in terms of what was asked.
        return Decision(
            "denied",
            message="the pod has no containers (spec.containers), so there is nothing to give "
            "leader election to",
            settings=settings,
        )
    inits = _list(pod_spec, "initContainers")
    present = any(_name(c) == CONTAINER_NAME for c in containers + inits)
    volumes = _list(pod_spec, "volumes")
    taken = [n for n in (VOLUME_NAME, ACK_VOLUME) if any(_name(v) == n for v in volumes)]

    changes: dict[str, Any] = {}
    if not present:
        problems = _conflicts(settings, containers + inits, taken)
        if problems:
            return Decision("denied", message="; ".join(problems), settings=settings)
        changes["/spec/initContainers"] = [sidecar_container(settings, spec, pod_spec), *inits]
    completed = [_completed(c, settings) or c for c in containers]
    if any(new is not old for new, old in zip(completed, containers, strict=True)):
        changes["/spec/containers"] = completed
    # state.json is well under 1 KiB, an acknowledgement a few bytes; the limit keeps a
    # runaway writer from eating node memory.
    new = [
        {"name": name, "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}
        for name in (VOLUME_NAME, ACK_VOLUME)
        if name not in taken
    ]
    if new:
        changes["/spec/volumes"] = [*volumes, *new]

    if not changes:
        return Decision("unchanged", settings=settings)
    return Decision("injected" if not present else "completed", changes=changes, settings=settings)
