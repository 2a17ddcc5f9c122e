"""Sidecars as real processes, driven the way the kubelet would drive them.

``SidecarProcess`` starts ``grelmicro-sidecar run`` with its own state dir and
port, reads its state file and HTTP endpoints, sends signals, and keeps its
JSON log lines for assertions. Test support only.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sidecar
from tests.cluster import free_port


def _console_script() -> Path:
    """``grelmicro-sidecar`` of the virtualenv running the tests (next to its Python), else on PATH."""
    beside = Path(sys.executable).with_name("grelmicro-sidecar")
    found = beside if beside.exists() else shutil.which("grelmicro-sidecar")
    if found is None:
        raise RuntimeError(
            "grelmicro-sidecar is not installed here: pip install -e '.[test]' first"
        )
    return Path(found)


BIN = _console_script()
#: The checkout whose ``sidecar`` the tests import (a git worktree, say): first on the sidecars'
#: path, so they run the code under test, not the one the console script was installed from.
SOURCE = Path(sidecar.__file__).resolve().parents[1]
FAST = ("--lease-duration=3s", "--renew-deadline=2s", "--retry-period=500ms")


class SidecarProcess:
    def __init__(
        self,
        workdir: Path,
        kubeconfig: Path | str,
        namespace: str,
        identity: str,
        election: str = "main",
        extra: tuple[str, ...] = FAST,
        env: dict[str, str] | None = None,
        command: list[str] | None = None,
    ):
        """``command``: run ``grelmicro-sidecar lock ... -- command`` instead of ``run``."""
        self.identity = identity
        self.state_dir = workdir / f"state-{identity}"
        self.port = free_port()
        self.log_path = workdir / f"{identity}.log"
        self.args = [
            str(BIN),
            "lock" if command else "run",
            f"--election={election}",
            f"--namespace={namespace}",
            f"--identity={identity}",
            f"--kubeconfig={kubeconfig}",
            f"--state-dir={self.state_dir}",
            f"--port={self.port}",
            "--log-level=debug",
            *extra,
            *(["--", *command] if command else []),
        ]
        self.env = {**os.environ, **(env or {})}
        path = self.env.get("PYTHONPATH")
        self.env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SOURCE), path) if p)
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0

    def start(self) -> SidecarProcess:
        self.started_at = time.monotonic()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=log, env=self.env)
        return self

    # ---- what the application sees ------------------------------------------
    def state(self) -> dict[str, Any] | None:
        return read_state(self.state_dir)

    def http(self, path: str, timeout: float = 2.0) -> tuple[int, Any]:
        url = f"http://127.0.0.1:{self.port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp:
                body = resp.read()
                status = resp.status
        except urllib.error.HTTPError as err:
            body = err.read()
            status = err.code
        except (OSError, TimeoutError):
            return 0, None
        try:
            return status, json.loads(body)
        except ValueError:
            return status, body.decode()

    def leads(self) -> bool:
        """The state file's claim, with ``valid_until`` honoured as contract §4 tells consumers to."""
        state = self.state()
        if not state or not state.get("is_leader"):
            return False
        valid = state.get("valid_until")
        return bool(valid) and _parse(valid) > time.time()

    # ---- logs -----------------------------------------------------------------
    def logs(self) -> list[dict[str, Any]]:
        out = []
        with contextlib.suppress(OSError):
            for line in self.log_path.read_text().splitlines():
                with contextlib.suppress(ValueError):
                    out.append(json.loads(line))
        return out

    def raw_log(self) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text()
        return ""

    def messages(self) -> list[str]:
        return [str(r.get("msg")) for r in self.logs()]

    # ---- signals ---------------------------------------------------------------
    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 30.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def cleanup_dir(self) -> None:
        shutil.rmtree(self.state_dir, ignore_errors=True)


def read_state(state_dir: Path) -> dict[str, Any] | None:
    """``state.json`` as a reader sees it; None while it is missing or not JSON."""
    try:
        data = json.loads((state_dir / "state.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _parse(stamp: str) -> float:
    import datetime as dt

    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def wait_for(
    predicate: Callable[[], Any], timeout: float, interval: float = 0.02, what: str = ""
) -> Any:
    """Poll ``predicate`` until truthy; its value, or AssertionError naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(interval)


def leaders(procs: list[SidecarProcess]) -> list[str]:
    return [p.identity for p in procs if p.leads()]
