"""Settings of ``grelmicro-sidecar run``, validated before anything starts.

Each flag can also come from ``GRELMICRO_SIDECAR_<FLAG>`` (upper case, ``-`` →
``_``); a flag on the command line wins. Every problem is reported as one line
that names the flag (and its env variable) and the rule, and exits with 2.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .durations import ACCEPTED_FORM, parse_duration
from .election import Timing
from .lease import MAX_LEASE_DURATION, lease_name
from .logs import LEVELS

ENV_PREFIX = "GRELMICRO_SIDECAR_"
DEFAULT_STATE_DIR = "/var/run/leader-election"
DEFAULT_PORT = 4040
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


class SettingsError(Exception):
    """A flag or env value is wrong; the message names it and the accepted form."""


def env_name(flag: str) -> str:
    return ENV_PREFIX + flag.upper().replace("-", "_")


def _raw(args: Any, flag: str) -> str | None:
    value = getattr(args, flag.replace("-", "_"), None)
    if value is not None:
        return str(value)
    return os.environ.get(env_name(flag))


def _where(args: Any, flag: str) -> str:
    if getattr(args, flag.replace("-", "_"), None) is not None:
        return f"--{flag}"
    return f"{env_name(flag)}"


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


def _duration(args: Any, flag: str, default: float) -> float:
    raw = _raw(args, flag)
    if raw is None:
        return default
    try:
        value = parse_duration(raw)
    except ValueError:
        raise SettingsError(f"{_where(args, flag)}={raw!r} is not {ACCEPTED_FORM}") from None
    if value <= 0:
        raise SettingsError(f"{_where(args, flag)}={raw!r} must be greater than 0")
    if value > MAX_LEASE_DURATION:
        raise SettingsError(f"{_where(args, flag)}={raw!r} must be at most 24h")
    return value


def default_identity() -> str:
    return os.environ.get("POD_NAME") or socket.gethostname()


def run_settings(args: Any) -> RunSettings:
    election = _raw(args, "election")
    if not election:
        raise SettingsError(
            f"--election is required (or {env_name('election')}): the election name, e.g. --election=main"
        )
    try:
        lease = lease_name(election)
    except ValueError as err:
        raise SettingsError(f"{_where(args, 'election')}: {err}") from None

    timing = Timing(
        lease_duration=_duration(args, "lease-duration", 15.0),
        renew_deadline=_duration(args, "renew-deadline", 10.0),
        retry_period=_duration(args, "retry-period", 2.0),
    )
    problems = timing.problems()
    if problems:
        raise SettingsError(problems[0])

    port_raw = _raw(args, "port")
    port = DEFAULT_PORT
    if port_raw is not None:
        try:
            port = int(port_raw)
        except ValueError:
            port = -1
        if not 0 <= port <= 65535:
            raise SettingsError(
                f"{_where(args, 'port')}={port_raw!r} must be a port number 1-65535, or 0 to disable HTTP"
            )

    level = (_raw(args, "log-level") or "info").lower()
    if level not in LEVELS:
        raise SettingsError(
            f"{_where(args, 'log-level')}={level!r} must be one of {', '.join(LEVELS)}"
        )

    identity = _raw(args, "identity") or default_identity()
    if not identity.strip():
        raise SettingsError(f"{_where(args, 'identity')} must not be empty")
    if len(identity) > 253:
        raise SettingsError(f"{_where(args, 'identity')} is {len(identity)} chars; at most 253")

    namespace = _raw(args, "namespace") or None
    if namespace is not None and not _DNS_LABEL.fullmatch(namespace):
        raise SettingsError(
            f"{_where(args, 'namespace')}={namespace!r} is not a namespace name: lowercase letters, "
            "digits and '-', starting and ending with a letter or digit, at most 63 chars"
        )
    state_dir = _raw(args, "state-dir") or DEFAULT_STATE_DIR
    return RunSettings(
        election=election,
        lease=lease,
        namespace=namespace,
        identity=identity,
        timing=timing,
        state_dir=Path(state_dir),
        port=port,
        kubeconfig=_raw(args, "kubeconfig") or None,
        log_level=level,
    )
