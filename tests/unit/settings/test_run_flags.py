"""Every flag of ``run``, and its ``GRELMICRO_SIDECAR_*`` env variable, with wrong types and ranges.

contract §7: a bad value exits 2 with one line on stderr that names where it came
from (the flag, or the env variable) and the rule, and no traceback. An empty
env variable counts as unset (a Kubernetes manifest often carries ``value: ""``).
In-process (``invoke``); tests/badinput/test_flags.py proves the same contract
once through a real process.
"""

from __future__ import annotations

import pytest

from tests.unit.settings.invoke import Outcome, invoke, one_line

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
    ("namespace", "Bad_NS", "expected a namespace name"),
    ("namespace", "a" * 64, "expected a namespace name"),
    ("namespace", "-x", "expected a namespace name"),
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
    "namespace name",
)


def env_of(flag: str) -> str:
    return "GRELMICRO_SIDECAR_" + flag.upper().replace("-", "_")


def run(args: list[str], env: dict[str, str] | None = None) -> Outcome:
    """``run`` with only the env variables given (no POD_NAME, no GRELMICRO_SIDECAR_*)."""
    return invoke(["run", *args], env)


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


def test_env_settings_are_validated_too() -> None:
    env = {"GRELMICRO_SIDECAR_ELECTION": "main", "GRELMICRO_SIDECAR_RENEW_DEADLINE": "1h"}
    out = invoke(["run", "--kubeconfig=/nonexistent/kc"], env)
    assert out.returncode == 2
    assert (
        "GRELMICRO_SIDECAR_RENEW_DEADLINE=1h" in out.stderr
        and len(out.stderr.strip().splitlines()) == 1
    )


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


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["run"], "--election is required"),
        (
            ["run", "--election=main", "--lease-duration=5s"],
            "--lease-duration=5s must be greater than renew-deadline 10s (the default)",
        ),
        (
            ["run", "--election=main", "--retry-period=fast"],
            "--retry-period='fast' is not valid; expected a duration such as 15s",
        ),
        (
            ["run", "--election=main", "--port=99999"],
            "--port='99999' is not valid; expected a port number",
        ),
        (
            ["run", "--election=main", "--kubeconfig=/nonexistent/kc"],
            "cannot read kubeconfig /nonexistent/kc",
        ),
        (["run", "--election=main", "--bogus"], "unrecognized arguments: --bogus"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
    ],
)
def test_bad_command_lines_exit_2_with_one_line(args: list[str], expected: str) -> None:
    assert expected in one_line(invoke(args))


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
    assert expected in one_line(invoke([*args, "--kubeconfig=/nonexistent/kc"]))


FAST = ["--lease-duration=3s", "--renew-deadline=2s", "--retry-period=500ms"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--election=x"], "lock needs a command after --"),
        (["--election=x", *FAST, "--kill-grace=1s", "--", "true"], "less than half of the renew"),
        (["--election=x", "--", "no-such-program-x"], "is not an executable file on PATH"),
    ],
)
def test_bad_usage_of_lock_is_one_line_and_exit_2(args: list[str], says: str) -> None:
    out = invoke(["lock", "--kubeconfig=/nonexistent", *args])
    assert out.returncode == 2, out
    assert says in out.stderr and out.stderr.count("\n") == 1, out.stderr
