"""The settings of ``run``, ``lock``, ``status`` and ``cleanup``: declared once, checked first.

Each command's table (``kit.options``) gives its parser; ``run_settings`` and
``lock_settings`` turn a ``Source`` into what the driver runs with (contract §7).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, replace
from pathlib import Path

from ..core import defaults
from ..core.healthpolicy import HealthPolicy
from ..core.lease import lease_name
from ..core.shards import MAX_NAME, shard_lease
from ..core.timing import Timing
from ..kit import checks, options
from ..kit.options import CONNECTION, TIMING, Setting, SettingsError, Source, Table, switch


def _election(raw: str) -> str:
    try:
        lease_name(raw)
    except ValueError as err:
        raise checks.Invalid(reason=f": {err}") from None
    return raw


def _identity(raw: str) -> str:
    if not raw.strip():
        raise checks.Invalid(reason=" must not be empty")
    if len(raw) > 253:
        raise checks.Invalid(reason=f" is {len(raw)} chars; at most 253")
    return raw


# fmt: off
ELECTION = Setting(
    "election", _election, "", "the election name; the Lease is leader-<name>", required="main")
IDENTITY: Setting[str | None] = Setting(
    "identity", _identity, None, "candidate identity", "$POD_NAME, then the hostname")
STATE_DIR = Setting("state-dir", str, defaults.STATE_DIR, "where state.json is written")
PORT = Setting("port", checks.port_or_zero, defaults.PORT,
    "HTTP port for /leader, /status, /events, /healthz, /metrics; 0 disables it")
LABEL_LEADER = Setting("label-leader", checks.boolean, False,
    f"label this pod ($POD_NAME) {defaults.LEADER_LABEL}={defaults.LEADER_LABEL_VALUE} while it "
    "leads, for a Service that selects the leader",
    argparse={"nargs": "?", "const": "true", "metavar": "BOOL"})
RELEASE = Setting("release", checks.one_of(("auto", "now", "after-valid-until")), "auto",
    "when a stopping sidecar releases its Lease: auto (in a pod: at once when the pod is being "
    "deleted, its app stopped first; else after the last valid_until), now, or after-valid-until")
ACK_FILE: Setting[str | None] = Setting("ack-file", str, None,
    "a file the app writes a term's fencing_token into once it stopped acting on it: "
    "ends that term's drain, as POST /drained does", "none")
HEALTH_URL: Setting[str | None] = Setting("health-url", checks.loopback_url, None,
    "the app's health endpoint on loopback; while it fails, this pod neither leads nor is "
    "named (200-399 is healthy)", "none: health is not followed")
HEALTH_FILE: Setting[str | None] = Setting("health-file", str, None,
    "a file the app touches while healthy; health is followed as for --health-url", "none")
HEALTH_FILE_AGE = Setting("health-file-age", checks.duration, 10.0,
    "how recently the app must have touched --health-file")
HEALTH_PERIOD = Setting("health-period", checks.duration, 2.0, "how often health is checked")
HEALTH_TIMEOUT = Setting("health-timeout", checks.duration, 1.0, "a check's time limit")
HEALTH_FAILURES = Setting("health-failures", checks.count, 3,
    "failed checks in a row that make the app unhealthy")
HEALTH_SUCCESSES = Setting("health-successes", checks.count, 2,
    "passed checks in a row that make it healthy again")
HEALTH_HOLD = Setting("health-hold", checks.duration, 30.0,
    "how long a leader leads before its app's health can move leadership: at most one "
    "move per this, however health flaps")
WHEN_NONE_HEALTHY = Setting("when-none-healthy", checks.one_of(("keep", "nobody")), "keep",
    "an unhealthy leader with no other candidate listed: keep leading, or step down")
SHARDS = Setting("shards", checks.shards, 1,
    "split the election into this many shards, each with one owner among the pods, balanced; "
    "1 is a plain election")
HEALTH: Table = (HEALTH_URL, HEALTH_FILE, HEALTH_FILE_AGE, HEALTH_PERIOD, HEALTH_TIMEOUT,
    HEALTH_FAILURES, HEALTH_SUCCESSES, HEALTH_HOLD, WHEN_NONE_HEALTHY)
KILL_GRACE: Setting[float | None] = Setting("kill-grace", checks.duration, None,
    "SIGTERM the command this long before valid_until, SIGKILL at it; less than half the "
    "renew deadline", f"a quarter of the renew deadline, at most {defaults.KILL_GRACE:g}s")
KUBECTL: Table = (
    Setting("context", str, None, "the kubeconfig context to use", "its current one"),
    Setting("as", str, None, "impersonate this user", "", argparse={"metavar": "USER"}),
    Setting("as-group", str, None, "impersonate this group (repeatable)", "", env=False,
            argparse={"action": "append", "metavar": "GROUP"}),
)
OUTPUT = Setting("output", str, "table", "how to print the Leases", short="-o", env=False,
    argparse={"choices": ("table", "wide", "json", "yaml")})
ALL_NAMESPACES = switch("all-namespaces", "the managed Leases of every namespace", "-A")
WATCH = switch("watch", "then print each change, like kubectl get -w", "-w")
TO: Setting[str | None] = Setting("to", str, None,
    "the pod to hand leadership to; it must be a listed candidate",
    "the candidate a release would name", env=False, argparse={"metavar": "POD"})
WAIT = Setting("timeout", checks.duration, 30.0, "how long to wait for the move", env=False)
LOCK_PORT = replace(PORT, default=0)
RUN: Table = (ELECTION, IDENTITY, *TIMING, STATE_DIR, PORT, *CONNECTION, LABEL_LEADER, RELEASE,
    ACK_FILE, *HEALTH, SHARDS)
LOCK: Table = (
    ELECTION, replace(IDENTITY, shown=f"{IDENTITY.shown}, then -<pid>"), *TIMING,
    replace(STATE_DIR, shown="a temporary directory, removed at exit"), LOCK_PORT, *CONNECTION,
    KILL_GRACE,
)
STATUS: Table = (*CONNECTION, *KUBECTL, OUTPUT, ALL_NAMESPACES, WATCH)
CLEANUP: Table = (*KUBECTL, *CONNECTION, options.MARGIN)
TRANSFER: Table = (TO, WAIT, *KUBECTL, *CONNECTION)
#: name: (help, description, table)
COMMANDS: dict[str, tuple[str, str, Table]] = {
    "run": ("take part in an election and publish the result", "", RUN),
    "lock": ("run a command only while this process leads",
        "Take part in an election; while this process leads, run CMD with "
        "LEADER_ELECTION_FENCING_TOKEN and LEADER_ELECTION_STATE_FILE in its environment. "
        "It gets SIGTERM --kill-grace before its leadership could lapse and SIGKILL at it. "
        "Exit: the command's code; 75 when leadership was lost under it; 2 bad usage.", LOCK),
    "status": ("show the managed Leases of a namespace", "", STATUS),
    "cleanup": ("delete expired managed Leases of a namespace, once", "", CLEANUP),
    "transfer": ("move an election's leadership to another candidate, and wait",
        "Ask ELECTION's leader to hand over (to --to, or to the candidate a release would "
        "name), then wait until another candidate leads. Needs get and patch on leases.",
        TRANSFER),
}
# fmt: on


@dataclass(frozen=True)
class RunSettings:
    election: str
    lease: str
    namespace: str | None  # None: resolved from the service account / kubeconfig later
    identity: str
    timing: Timing
    state_dir: Path
    port: int
    kubeconfig: str | None
    log_level: str
    #: ``--label-leader``: the pod that carries the leader label while this leads (contract §4)
    label_pod: str | None = None
    #: ``--release`` (contract §5): ``auto`` asks about ``pod`` ($POD_NAME; outside a pod: now)
    release: str = "auto"
    pod: str | None = None
    #: ``--ack-file``: where the app may acknowledge a drain (contract §4; None: HTTP only)
    ack_file: Path | None = None
    #: ``--health-*`` (contract §2, health); None: the app's health is not followed
    health: Health | None = None
    #: ``--shards`` (contract §2, shards): 1 is a plain election
    shards: int = 1


@dataclass(frozen=True)
class Health:
    url: str | None
    file: Path | None
    file_age: float
    policy: HealthPolicy


def _health(src: Source) -> Health | None:
    url, file = src.get(HEALTH_URL), src.get(HEALTH_FILE)
    if url and file:
        raise SettingsError(
            f"{src.where('health-url')} and {src.where('health-file')} are both set: "
            "health is one check; keep one"
        )
    if not (url or file):
        tuned = [s.flag for s in HEALTH[2:] if src.raw(s.flag)]
        if tuned:
            raise SettingsError(
                f"{src.where(tuned[0])} without --health-url or --health-file follows nothing; "
                "set one of them, or drop it"
            )
        return None
    policy = HealthPolicy(
        period=src.get(HEALTH_PERIOD),
        failures=src.get(HEALTH_FAILURES),
        successes=src.get(HEALTH_SUCCESSES),
        timeout=src.get(HEALTH_TIMEOUT),
        hold=src.get(HEALTH_HOLD),
        when_none=src.get(WHEN_NONE_HEALTHY),
    )
    return Health(url or None, Path(file) if file else None, src.get(HEALTH_FILE_AGE), policy)


def run_settings(src: Source, lock: bool = False) -> RunSettings:
    """``run``'s settings; with ``lock``, that command's defaults (see ``lock_settings``)."""
    election, pod = src.get(ELECTION), src.environ.get("POD_NAME")
    default = pod or socket.gethostname()  # lock: -<pid>, unique in a pod or on a host
    identity = src.get(IDENTITY) or (f"{default}-{os.getpid()}" if lock else default)
    settings = RunSettings(
        election=election,
        lease=lease_name(election),
        namespace=src.get(options.NAMESPACE),
        identity=identity,
        timing=src.timing(),
        state_dir=Path(src.get(STATE_DIR)),
        port=src.get(LOCK_PORT if lock else PORT),
        kubeconfig=src.get(options.KUBECONFIG),
        log_level=src.get(options.LOG_LEVEL),
        release="now" if lock else src.get(RELEASE),  # lock's command is gone first
        pod=pod,
        ack_file=None if lock or not (ack := src.get(ACK_FILE)) else Path(ack),
        health=None if lock else _health(src),
        shards=1 if lock else src.get(SHARDS),
    )
    if settings.shards > 1:
        _check_sharded(src, settings)
    label = not lock and src.get(LABEL_LEADER)
    if label and not pod:  # the pod to label is this one
        raise SettingsError(
            f"{src.where('label-leader')} needs $POD_NAME, this pod's name: add env POD_NAME "
            "with valueFrom fieldRef metadata.name (the injector does)"
        )
    return replace(settings, label_pod=pod) if label else settings


def _check_sharded(src: Source, settings: RunSettings) -> None:
    """What a sharded election cannot do (contract §2, shards), refused with the way out."""
    last = shard_lease(settings.lease, settings.shards - 1)
    if len(last) > MAX_NAME:
        raise SettingsError(
            f"{src.where('election')} is too long for {settings.shards} shards: the Lease "
            f"{last[:40]}... would pass {MAX_NAME} chars; use a shorter name"
        )
    health = settings.health
    unsupported = {
        "label-leader": (
            src.get(LABEL_LEADER),
            "a label says which pod leads; with shards, every pod may own some",
        ),
        "ack-file": (
            settings.ack_file,
            "one file cannot name a shard; acknowledge with "
            "POST /drained?shard=<i>&token=<fencing_token>",
        ),
        "health-url": (health and health.url, "health-driven shards are not supported yet"),
        "health-file": (health and health.file, "health-driven shards are not supported yet"),
    }
    for flag, (given, why) in unsupported.items():
        if given:
            raise SettingsError(f"{src.where(flag)} cannot be used with --shards: {why}")


@dataclass(frozen=True)
class LockSettings:
    run: RunSettings
    command: list[str]
    kill_grace: float
    #: no --state-dir: ``run`` makes a temporary one (and removes it at exit)
    scratch_state_dir: bool


def lock_settings(src: Source) -> LockSettings:
    """``run``'s settings with ``lock``'s defaults (contract §7), and the command to run."""
    run = run_settings(src, lock=True)
    command = src.args.cmd[1:] if src.args.cmd[:1] == ["--"] else list(src.args.cmd)
    if not command:
        raise SettingsError(
            "lock needs a command after --, e.g. grelmicro-sidecar lock --election=nightly -- ./job.sh"
        )
    import shutil  # only lock needs it (with bz2 and lzma, which run does not load)

    if shutil.which(program := command[0]) is None:  # checks a path, or finds a name on PATH
        where = "" if "/" in program else " on PATH"
        raise SettingsError(
            f"lock: {program!r} is not an executable file{where}; give the command after --, e.g. -- ./job.sh"
        )
    half = run.timing.renew_deadline / 2
    grace = src.get(KILL_GRACE) or min(defaults.KILL_GRACE, half / 2)  # never 0: refused
    if not 0 < grace < half:
        raise SettingsError(
            f"{src.where('kill-grace')} must be more than 0 and less than half of the renew "
            f"deadline ({half:g}s): a leader renews every half, and the command gets SIGTERM "
            "this long before its leadership could lapse"
        )
    return LockSettings(run, command, grace, scratch_state_dir=not src.raw("state-dir"))
