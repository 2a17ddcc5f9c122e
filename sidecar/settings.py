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

from . import defaults
from .lease import lease_name
from .options import SIDECAR_ENV, SettingsError, Source
from .timing import Timing


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


def default_identity() -> str:
    return os.environ.get("POD_NAME") or socket.gethostname()


def run_settings(args: Any) -> RunSettings:
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

    identity = src.raw("identity") or default_identity()
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
        port=src.port("port", defaults.PORT, zero_disables=True),
        kubeconfig=src.raw("kubeconfig") or None,
        log_level=src.log_level(),
    )
