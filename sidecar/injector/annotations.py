"""Reading a pod's ``leader-election.grelmicro.io/*`` annotations (contract §6).

Guarantees: ``read_settings`` never raises, whatever the pod looks like. It
returns the complete, valid settings, or every problem at once, each naming
the annotation, the value and the accepted form, so the one message ``kubectl
apply`` prints is enough to fix the manifest. Values go through the checks of
the flags they become (``kit.checks``), so admission and the sidecar agree.
Unknown keys under the prefix are refused: a typo such as ``lease-duraton``
would otherwise leave the pod with a timing its author did not choose.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from ..core.defaults import PORT as DEFAULT_PORT
from ..core.defaults import STATE_DIR as DEFAULT_STATE_DIR
from ..core.durations import format_duration
from ..core.lease import election_of, lease_name
from ..core.timing import Timing
from ..kit.checks import Invalid, count, duration, exact_boolean, loopback_url, one_of, shards
from ..kit.checks import port as port_check

PREFIX = "leader-election.grelmicro.io/"
KNOWN = tuple(
    PREFIX + key
    for key in (
        "inject", "name", "lease-duration", "renew-deadline", "retry-period",
        "state-dir", "port", "gate-readiness", "label-leader", "shards",
    )
)  # fmt: skip
INJECT, NAME, _, _, _, STATE_DIR, PORT, GATE_READINESS, LABEL_LEADER, SHARDS = KNOWN
#: The app's health (contract §2, health): each becomes the sidecar's flag of that name, but
#: ``health-file: "true"``, which has the app touch ``healthy`` in its ack directory.
HEALTH: dict[str, Callable[[str], object]] = {
    "health-url": loopback_url, "health-file": exact_boolean, "health-file-age": duration,
    "health-period": duration, "health-timeout": duration, "health-failures": count,
    "health-successes": count, "health-hold": duration,
    "when-none-healthy": one_of(("keep", "nobody")),
}  # fmt: skip
KNOWN += tuple(PREFIX + key for key in HEALTH)
#: A namespace label asking for the sidecar in every pod of the namespace (as Istio's
#: ``istio-injection=enabled``); a pod opts out with ``inject: "false"`` (contract §6).
NAMESPACE_LABEL, NAMESPACE_ENABLED = PREFIX + "inject", "enabled"

_STATE_DIR = re.compile(r"^(/[A-Za-z0-9._-]+)+$")
T = TypeVar("T")


@dataclass(frozen=True)
class PodSettings:
    """What the injected sidecar runs with, all validated."""

    election: str  # sanitised (contract §2): the Lease is ``leader-<election>``
    election_source: str  # where the name came from, for logs and docs
    timing: Timing
    state_dir: str
    port: int
    gate_readiness: bool
    label_leader: bool = False
    #: The ``--health-*`` flags the pod asks for (none: its app's health is not followed).
    health_args: tuple[str, ...] = ()
    #: The election's shards (contract §2, shards); 1 is a plain election.
    shards: int = 1

    @property
    def state_file(self) -> str:
        return f"{self.state_dir}/state.json"

    @property
    def ack_dir(self) -> str:
        """Where the app may write ``ack_file`` (the state directory is read-only to it)."""
        return f"{self.state_dir}-ack"

    @property
    def ack_file(self) -> str:
        return f"{self.ack_dir}/drained"

    @property
    def health_file(self) -> str | None:
        """What the app touches while healthy, when the pod asks for ``health-file``."""
        asked = any(a.startswith("--health-file=") for a in self.health_args)
        return f"{self.ack_dir}/healthy" if asked else None


def show(value: object, limit: int = 80) -> str:
    """A value as it would appear in YAML, quoted and cut, safe to echo back."""
    text = json.dumps(value if isinstance(value, str) else str(value), ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 2] + '…"'


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def annotations_of(pod: Mapping[str, Any]) -> dict[str, str]:
    raw = _mapping(_mapping(pod.get("metadata")).get("annotations"))
    return {str(k): v if isinstance(v, str) else str(v) for k, v in raw.items()}


def _read(
    notes: Mapping[str, str], key: str, check: Callable[[str], T], default: T, problems: list[str]
) -> tuple[T, bool]:
    """(value, given): the annotation through the flag's check, else the default (and a problem)."""
    raw = notes.get(key)
    if raw is None:
        return default, False
    try:
        return check(raw), True
    except Invalid as err:
        problems.append(f"annotation {key}: {show(raw)} is not valid; expected {err.accepted}")
        return default, False


def _election_name(raw: str) -> str:
    """The election, sanitised (contract §2)."""
    try:
        return election_of(lease_name(raw))
    except ValueError:
        raise Invalid(
            'an election name with letters or digits, such as "main" or "my-app" '
            "(the Lease is leader-<name>, at most 253 characters)"
        ) from None


def _state_dir(raw: str) -> str:
    """An absolute directory path, without a trailing '/'."""
    clean = raw.rstrip("/") if raw != "/" else raw
    segments = clean.split("/")[1:]
    if not _STATE_DIR.match(clean) or any(s in (".", "..") for s in segments) or len(clean) > 1024:
        raise Invalid(
            "an absolute directory path such as /var/run/leader-election "
            "(letters, digits, '.', '_', '-' and '/'; not / itself, no '..')"
        )
    return clean


def default_election(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """(sanitised election, source) from the first usable of: the controlling owner (a
    ReplicaSet stands for its Deployment: its name minus the ``pod-template-hash``), the
    ``app.kubernetes.io/name`` label, ``generateName`` trimmed, the pod's name; or None."""
    meta = _mapping(pod.get("metadata"))
    labels = _mapping(meta.get("labels"))
    hash_ = labels.get("pod-template-hash")
    suffix = f"-{hash_}" if isinstance(hash_, str) and hash_ else None
    owners = meta.get("ownerReferences")
    refs = [o for o in owners if isinstance(o, Mapping)] if isinstance(owners, list) else []
    refs.sort(key=lambda o: o.get("controller") is not True)  # the controller first
    candidates: list[tuple[object, str]] = []
    for ref in refs[:1]:
        kind, name = ref.get("kind"), ref.get("name")
        if kind == "ReplicaSet" and suffix and isinstance(name, str) and name.endswith(suffix):
            candidates.append((name.removesuffix(suffix), "Deployment"))
        else:
            candidates.append((name, str(kind)))
    generate = meta.get("generateName")
    candidates += [
        (labels.get("app.kubernetes.io/name"), "label app.kubernetes.io/name"),
        (generate.rstrip("-") if isinstance(generate, str) else None, "generateName"),
        (meta.get("name"), "pod name"),
    ]
    for value, source in candidates:
        if isinstance(value, str) and value:
            try:
                return election_of(lease_name(value)), source
            except ValueError:
                continue
    return None


def read_settings(pod: Mapping[str, Any], defaults: Timing) -> PodSettings | list[str]:
    """The sidecar's settings from the pod, or the list of problems (never raises)."""
    notes = annotations_of(pod)
    problems = [
        f"annotation {key}: {show(notes[key])} is not a known annotation; expected one of "
        + ", ".join(k[len(PREFIX) :] for k in KNOWN)
        + f" (under {PREFIX})"
        for key in sorted(notes)
        if key.startswith(PREFIX) and key not in KNOWN
    ]

    election: tuple[str, str] | None
    if NAME in notes:
        name = _read(notes, NAME, _election_name, "", problems)[0]
        election = (name, "annotation") if name else None
    else:
        election = default_election(pod)
        if election is None:
            problems.append(
                f"cannot choose an election name: the pod has no owner, no "
                f"app.kubernetes.io/name label, no generateName and no name; set {NAME}"
            )

    before, times, given = len(problems), dict[str, float](), set[str]()
    for field in ("lease_duration", "renew_deadline", "retry_period"):
        setting = field.replace("_", "-")
        default = getattr(defaults, field)
        times[field], was_given = _read(notes, PREFIX + setting, duration, default, problems)
        if was_given:
            given.add(setting)
    timing = Timing(**times)

    def origin(setting: str, seconds: float) -> str:  # as contract §3's rules name a value
        key, spelled = PREFIX + setting, format_duration(seconds)
        if setting in given:
            return f"{key}={show(spelled)}"
        return f"{setting} {spelled} (the injector's default; set {key} to change it)"

    if len(problems) == before:  # the rules between them only mean something once each parses
        problems += timing.problems(origin)

    state_dir = _read(notes, STATE_DIR, _state_dir, DEFAULT_STATE_DIR, problems)[0]
    port = _read(notes, PORT, port_check, DEFAULT_PORT, problems)[0]
    gate = _read(notes, GATE_READINESS, exact_boolean, False, problems)[0]
    label = _read(notes, LABEL_LEADER, exact_boolean, False, problems)[0]
    health = _health_args(notes, f"{state_dir}-ack/healthy", problems)
    shard_count = _read(notes, SHARDS, shards, 1, problems)[0]
    if shard_count > 1:
        problems += _unsharded(notes)
    if problems or election is None:
        return problems
    return PodSettings(
        election[0], election[1], timing, state_dir, port, gate, label, health, shard_count
    )


def _unsharded(notes: Mapping[str, str]) -> list[str]:
    """What a sharded election cannot do (the sidecar refuses the same flags), and why."""
    why = {
        GATE_READINESS: "a pod that owns no shard is not unready; probe /shards/<i> yourself",
        LABEL_LEADER: "a label says which pod leads; with shards, every pod may own some",
    }
    out = [
        f"annotation {key}: cannot be used with {SHARDS}: {reason}"
        for key, reason in why.items()
        if notes.get(key, "false") != "false"
    ]
    out += [
        f"annotation {PREFIX}{key}: cannot be used with {SHARDS}: health-driven shards are not "
        "supported yet"
        for key in HEALTH
        if PREFIX + key in notes
    ]
    return out


def _health_args(
    notes: Mapping[str, str], health_file: str, problems: list[str]
) -> tuple[str, ...]:
    """The sidecar's ``--health-*`` flags from the pod's health annotations (``HEALTH``)."""
    args, checks = [], ("health-url", "health-file")
    for key, check in HEALTH.items():
        value, given = _read(notes, PREFIX + key, check, None, problems)
        if given and key == "health-file":
            args += [f"--health-file={health_file}"] if value else []
        elif given:
            args.append(f"--{key}={notes[PREFIX + key].strip()}")
    chosen = [a for a in args if a.split("=", 1)[0][2:] in checks]
    if len(chosen) > 1:
        problems.append(f"annotations {PREFIX}health-url and {PREFIX}health-file: keep one")
    elif args and not chosen:
        problems.append(
            f"annotations {PREFIX}health-*: set {PREFIX}health-url or {PREFIX}health-file "
            "too, or they follow nothing"
        )
    return tuple(args)
