"""``run`` as a real process: a bad setting, a port in use, a namespace that does not exist.

contract §7: a bad value exits 2 with one line on stderr that names where it
came from (the flag, or the env variable) and the rule, and no traceback. Every
flag and env variable is checked in-process (tests/unit/settings); the one
test here proves the contract through the console script, end to end. The
others need a reachable cluster (the value is only wrong at run time).
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

from tests.cluster import ControlPlane
from tests.sidecar.proc import BIN


def run(
    args: list[str], env: dict[str, str] | None = None, timeout: float = 20
) -> subprocess.CompletedProcess[str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("GRELMICRO_SIDECAR_") and k != "POD_NAME"
    }
    return subprocess.run(
        [str(BIN), "run", *args],
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_a_bad_setting_exits_2_with_one_line_and_no_traceback() -> None:
    """The console script, the env variable's turn after the flags, no traceback."""
    out = run(["--election=main"], env={"GRELMICRO_SIDECAR_PORT": "http"})
    assert out.returncode == 2, (out.returncode, out.stderr[-2000:])
    assert "Traceback" not in out.stderr and out.stdout == "", out
    assert out.stderr.splitlines() == [
        "grelmicro-sidecar: GRELMICRO_SIDECAR_PORT='http' is not valid; "
        "expected a port number from 1 to 65535, or 0 to disable HTTP"
    ], out.stderr


def test_port_in_use_exits_1_with_the_fix(cluster: ControlPlane, tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("", 0))
        s.listen()
        port = s.getsockname()[1]
        out = run(
            [
                "--election=main",
                f"--kubeconfig={cluster.kubeconfig}",
                f"--state-dir={tmp_path}",
                f"--port={port}",
                "--namespace=default",
            ]
        )
    # A runtime failure (exit 1): the JSON log line, then the same message as a plain last line.
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    line = out.stderr.strip().splitlines()[-1]
    assert f"cannot listen on port {port}" in line and "address already in use" in line
    assert "pick another with --port" in line


def test_namespace_that_does_not_exist_is_logged_and_backed_off(
    cluster: ControlPlane, tmp_path: Path
) -> None:
    import time
    import uuid

    missing = f"missing-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen(
        [
            str(BIN),
            "run",
            "--election=main",
            f"--kubeconfig={cluster.kubeconfig}",
            f"--state-dir={tmp_path}",
            "--port=0",
            f"--namespace={missing}",
            "--lease-duration=3s",
            "--renew-deadline=2s",
            "--retry-period=500ms",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(5)
    proc.terminate()
    _, err = proc.communicate(timeout=20)
    time.sleep(0.5)  # the audit log is written asynchronously
    requests = [
        e
        for e in cluster.audit_events()
        if missing in e.get("requestURI", "")
        and e.get("stage") == "ResponseComplete"
        and e.get("verb") != "watch"
        # the API server's own namespace lookups (admission) are not the sidecar's
        and e.get("userAgent", "").startswith("grelmicro-sidecar/")
    ]
    verbs = {v: sum(1 for e in requests if e["verb"] == v) for v in {e["verb"] for e in requests}}
    # Retrying every retry period (500 ms), with backoff, is at most ~10 requests in 5 s.
    assert len(requests) <= 15, f"{len(requests)} requests in 5 s: {verbs}"
    assert missing in err and "not found" in err, err
