"""Every flag of ``run``, and its ``GRELMICRO_SIDECAR_*`` env variable, with wrong types and ranges.

contract §7: a bad value exits 2 with one line on stderr that names where it came
from (the flag, or the env variable) and the rule, and no traceback. An empty
env variable counts as unset (a Kubernetes manifest often carries ``value: ""``).
A few cases need a reachable cluster (the value is only wrong at run time).
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from tests.cluster import ControlPlane
from tests.sidecar.proc import BIN

# (flag, bad value, fragment of the one stderr line). Every flag of `run` appears.
CASES = [
    ("election", "---", "no letters or digits"),
    ("election", "é", "no letters or digits"),
    ("election", "a" * 300, "too long"),
    ("identity", "   ", "must not be empty"),
    ("identity", "x" * 254, "at most 253"),
    ("lease-duration", "fast", "expected a duration such as 15s"),
    ("lease-duration", "15", "expected a duration such as"),
    ("lease-duration", "-15s", "expected a duration such as"),
    ("lease-duration", "1e3s", "expected a duration such as"),
    ("lease-duration", "0s", "expected a duration greater than 0"),
    ("lease-duration", "5s", "=5s must be greater than renew-deadline 10s (the default)"),
    ("lease-duration", "15500ms", "whole number of seconds"),
    ("renew-deadline", "ten", "expected a duration such as"),
    ("renew-deadline", "0ms", "expected a duration greater than 0"),
    ("renew-deadline", "20s", "lease-duration 15s (the default) must be greater than"),
    ("renew-deadline", "2s", "=2s must be greater than 1.2 × retry-period 2s (the default)"),
    ("retry-period", "soon", "expected a duration such as"),
    ("retry-period", "0s", "expected a duration greater than 0"),
    ("retry-period", "9s", "renew-deadline 10s (the default) must be greater than 1.2 ×"),
    ("port", "http", "expected a port number from 1 to 65535, or 0 to disable HTTP"),
    ("port", "-1", "expected a port number"),
    ("port", "65536", "expected a port number"),
    ("port", "1.5", "expected a port number"),
    ("port", "0x50", "expected a port number"),
    ("log-level", "loud", "expected one of debug, info, warning, error"),
    ("log-level", "10", "expected one of"),
    ("kubeconfig", "/nonexistent/kc", "cannot read kubeconfig /nonexistent/kc"),
    ("kubeconfig", "/", "cannot read kubeconfig /"),
    ("label-leader", "maybe", "true or false"),
    ("label-leader", "true", "needs $POD_NAME, this pod's name"),
]
#: Where a bad value names its source (the rules between timings name the one given, too).
NAMES_SOURCE = (
    "expected a duration",
    "must be greater than",
    "whole number",
    "port number",
    "expected one of",
    "must not be empty",
    "at most 253",
    "no letters",
    "too long",
)


def env_of(flag: str) -> str:
    return "GRELMICRO_SIDECAR_" + flag.upper().replace("-", "_")


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


def one_line(out: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert out.returncode == code, (out.returncode, out.stderr[-2000:])
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    return lines[0]


def _base_args(flag: str) -> list[str]:
    # Everything else valid and local, so only the value under test can be wrong.
    args = [
        "--port=0",
        "--state-dir=/tmp/grelmicro-badinput-never-used",
        "--kubeconfig=/nonexistent/kc",
    ]
    if flag != "election":
        args.insert(0, "--election=main")
    return [a for a in args if not a.startswith(f"--{flag}=")]


@pytest.mark.parametrize(
    ("flag", "value", "expected"), CASES, ids=[f"{f}={v[:12]}" for f, v, _ in CASES]
)
def test_bad_flag(flag: str, value: str, expected: str) -> None:
    line = one_line(run([*_base_args(flag), f"--{flag}={value}"]))
    assert expected in line
    if any(key in expected for key in NAMES_SOURCE):
        assert f"--{flag}" in line, line


@pytest.mark.parametrize(
    ("flag", "value", "expected"), CASES, ids=[f"{f}={v[:12]}" for f, v, _ in CASES]
)
def test_bad_env(flag: str, value: str, expected: str) -> None:
    line = one_line(run(_base_args(flag), env={env_of(flag): value}))
    assert expected in line
    if any(key in expected for key in NAMES_SOURCE):
        assert env_of(flag) in line and f"--{flag}" not in line, line


def test_flag_wins_over_a_bad_env() -> None:
    out = run([*_base_args("port"), "--port=0"], env={env_of("port"): "http"})
    assert "port" not in out.stderr and "cannot read kubeconfig" in one_line(out)


@pytest.mark.parametrize(
    "flag", ["election", "namespace", "identity", "state-dir", "kubeconfig", "log-level"]
)
def test_empty_env_counts_as_unset(flag: str) -> None:
    out = run(_base_args(flag), env={env_of(flag): ""})
    line = one_line(out)
    if flag == "election":
        assert "--election is required (or GRELMICRO_SIDECAR_ELECTION)" in line
    else:  # the defaults were used; the run stopped at the (deliberately missing) kubeconfig
        assert "cannot read kubeconfig" in line or "no cluster credentials" in line, line


@pytest.mark.parametrize(
    ("flag", "expected"),
    [
        ("port", "expected a port number"),
        ("lease-duration", "expected a duration such as"),
        ("renew-deadline", "expected a duration such as"),
        ("retry-period", "expected a duration such as"),
    ],
)
def test_empty_number_is_refused_not_defaulted(flag: str, expected: str) -> None:
    # Unlike the names and paths above, an empty port or duration is an error (named clearly).
    line = one_line(run(_base_args(flag), env={env_of(flag): ""}))
    assert expected in line and env_of(flag) in line, line
    line = one_line(run([*_base_args(flag), f"--{flag}="]))
    assert expected in line and f"--{flag}" in line, line


@pytest.mark.parametrize(
    "timing",
    [
        ["--lease-duration=1000000h", "--renew-deadline=999999h", "--retry-period=1h"],
        ["--lease-duration=48h", "--renew-deadline=47h", "--retry-period=1h"],
    ],
)
def test_durations_beyond_a_day_exit_2(timing: list[str]) -> None:
    # The kubeconfig is missing: a valid timing goes on to fail on it (still exit 2, another line).
    line = one_line(run([*_base_args("lease-duration"), *timing]))
    assert "--lease-duration" in line and "24h" in line, line


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


@pytest.mark.parametrize("namespace", ["Bad_NS", "a" * 64, "-x"])
def test_invalid_namespace_name_exits_2(
    namespace: str, cluster: ControlPlane, tmp_path: Path
) -> None:
    proc = subprocess.Popen(
        [
            str(BIN),
            "run",
            "--election=main",
            f"--kubeconfig={cluster.kubeconfig}",
            f"--state-dir={tmp_path}",
            "--port=0",
            f"--namespace={namespace}",
            "--log-level=debug",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _, err = proc.communicate(timeout=8)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        print(err)
        raise AssertionError(
            f"still running after 8 s with --namespace={namespace!r}:\n{err}"
        ) from None
    assert proc.returncode == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "--namespace" in lines[0], err


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


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["cleanup", "--margin=soon"], "--margin='soon' is not valid; expected a duration such as"),
        (["cleanup", "--margin=-5s"], "--margin='-5s' is not valid; expected a duration such as"),
        # No margin at all: refused.
        (
            ["cleanup", "--margin=0s"],
            "--margin='0s' is not valid; expected a duration greater than 0",
        ),
        # The margin also covers the sweeper's own pauses: below 5 s is refused.
        (
            ["cleanup", "--margin=2s"],
            "--margin='2s' is not valid; expected a duration of at least 5s",
        ),
        (["cleanup", "--log-level=loud"], "--log-level='loud' is not valid; expected one of"),
        (["status", "--log-level=loud"], "--log-level='loud' is not valid; expected one of"),
        (["status", "-o", "xml"], "invalid choice: 'xml'"),
    ],
)
def test_bad_flags_of_status_and_cleanup(args: list[str], expected: str) -> None:
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("GRELMICRO_SIDECAR_") and k != "POD_NAME"
    }
    out = subprocess.run(
        [str(BIN), *args, "--kubeconfig=/nonexistent/kc"],
        env=base,
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert expected in one_line(out)
