"""Settings of ``grelmicro-sidecar run``, validated before anything starts.

Each flag can also come from ``GRELMICRO_SIDECAR_<FLAG>``; the flag wins (see
``options``). Every problem is one line naming the flag or env variable and the
rule; ``cli`` exits 2 with it.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core import defaults
from ..core.lease import lease_name
from ..core.timing import Timing
from ..kit.options import SIDECAR_ENV, SettingsError, Source


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


def default_identity() -> str:
    return os.environ.get("POD_NAME") or socket.gethostname()


def run_settings(args: Any, lock: bool = False) -> RunSettings:
    """``run``'s settings; with ``lock``, that command's defaults (see ``lock_settings``)."""
    src = Source(args, SIDECAR_ENV)
    election = src.raw("election")
    if not election:
        raise SettingsError(
            f"--election is required (or {src.env_name('election')}): the election name, "
            "e.g. --election=main"
        )
    try:
        lease = lease_name(election)
    except ValueError as err:
        raise SettingsError(f"{src.where('election')}: {err}") from None

    # Two lock processes on one host or in one pod must not share an identity.
    identity = src.raw("identity") or (
        f"{default_identity()}-{os.getpid()}" if lock else default_identity()
    )
    if not identity.strip():
        raise SettingsError(f"{src.where('identity')} must not be empty")
    if len(identity) > 253:
        raise SettingsError(f"{src.where('identity')} is {len(identity)} chars; at most 253")

    return RunSettings(
        election=election,
        lease=lease,
        namespace=src.namespace(),
        identity=identity,
        timing=src.timing(),
        state_dir=Path(src.raw("state-dir") or defaults.STATE_DIR),
        port=src.port("port", 0 if lock else defaults.PORT, zero_disables=True),
        kubeconfig=src.raw("kubeconfig") or None,
        log_level=src.log_level(),
        label_pod=None if lock else _label_pod(src),
    )


def _label_pod(src: Source) -> str | None:
    """The pod to label while leading, with ``--label-leader``: this pod, from $POD_NAME."""
    if not src.boolean("label-leader", False):
        return None
    pod = os.environ.get("POD_NAME", "")
    if not pod:
        raise SettingsError(
            f"{src.where('label-leader')} needs $POD_NAME, this pod's name: add env POD_NAME "
            "with valueFrom fieldRef metadata.name (the injector does)"
        )
    return pod


@dataclass(frozen=True)
class LockSettings:
    run: RunSettings
    command: list[str]
    kill_grace: float
    #: no --state-dir: ``run`` makes a temporary one (and removes it at exit)
    scratch_state_dir: bool


def lock_settings(args: Any) -> LockSettings:
    """``lock``: ``run``'s flags with a process-unique identity, no HTTP port unless asked,
    a temporary state dir unless one is given, and the command."""
    run = run_settings(args, lock=True)
    command = list(args.cmd)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise SettingsError(
            "lock needs a command after --, e.g. grelmicro-sidecar lock --election=nightly -- ./job.sh"
        )
    import shutil  # only lock needs it (with bz2, lzma: ~0.5 MB that run does not load)

    program = command[0]
    found = shutil.which(program) if "/" not in program else program
    if found is None or not os.access(found, os.X_OK) or os.path.isdir(found):
        raise SettingsError(
            f"lock: {program!r} is not an executable file"
            + (" on PATH" if "/" not in program else "")
            + "; give the command after --, e.g. -- ./job.sh"
        )
    src = Source(args, SIDECAR_ENV)
    half = run.timing.renew_deadline / 2
    grace = src.duration("kill-grace", min(defaults.KILL_GRACE, half / 2))
    if not 0 < grace < half:
        raise SettingsError(
            f"{src.where('kill-grace')} must be more than 0 and less than half of the renew "
            f"deadline ({half:g}s): a leader renews every half, and the command gets SIGTERM "
            "this long before its leadership could lapse"
        )
    return LockSettings(run, command, grace, scratch_state_dir=not src.raw("state-dir"))
