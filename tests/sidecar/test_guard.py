"""The guard of ``lock`` as a real process, on its own: the command ends by the deadline whatever ``lock`` does.

Run exactly as ``lock`` runs it (``python -I -S guard.py GRACE DEADLINE CONTROL
REPORT -- CMD``), with the pipes made here, so the test plays ``lock``: it can
die at any moment, before it read the guard's report too.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from sidecar.driver import guard

GUARD = Path(guard.__file__)


def _start(tmp_path: Path, deadline_in: float) -> tuple[subprocess.Popen[bytes], int, int, Path]:
    """A guard running ``sleep 60`` that records its PID; (guard, control w, report r, pid file).

    Its stderr (which the command shares) goes to ``tmp_path/stderr``.
    """
    control_r, control_w = os.pipe()
    report_r, report_w = os.pipe()
    pid_file = tmp_path / "pid"
    command = ["sh", "-c", f"echo $$ > {pid_file}; exec sleep 60"]
    proc = subprocess.Popen(
        [
            sys.executable, "-I", "-S", str(GUARD),
            "0.2", str(time.monotonic() + deadline_in), str(control_r), str(report_w),
            "--", *command,
        ],
        pass_fds=(control_r, report_w),
        stderr=(tmp_path / "stderr").open("wb"),
    )  # fmt: skip
    os.close(control_r)
    os.close(report_w)
    return proc, control_w, report_r, pid_file


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_lock_that_died_before_reading_the_report_still_gets_its_command_ended(
    tmp_path: Path,
) -> None:
    """lock SIGKILLed as the guard starts: its report pipe has no reader. The guard must go on
    guarding (the command ends by the deadline), not die of a broken pipe and leave the command
    running with no deadline at all."""
    proc, control_w, report_r, pid_file = _start(tmp_path, deadline_in=3.0)
    os.close(report_r)  # lock is gone: nobody will read the report
    os.close(control_w)  # nor send a new deadline
    started = time.monotonic()
    while not pid_file.exists() or not pid_file.read_text().strip():
        assert time.monotonic() - started < 10, "the command never started"
        time.sleep(0.02)
    pid = int(pid_file.read_text())
    try:
        code = proc.wait(timeout=10)
        stderr = (tmp_path / "stderr").read_text()
        assert "Traceback" not in stderr, stderr
        assert code == 128 + 15  # SIGTERM a grace before the deadline ended the command
        assert _gone(pid)
        assert time.monotonic() - started < 5
    finally:
        if not _gone(pid):
            os.kill(pid, 9)
