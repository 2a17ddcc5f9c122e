"""README command 1 (``make demo`` runs ``python -m tests.demo``): it runs, and leaves nothing behind.

Both tests run the demo as a real process from the repository root, as make
does; the Ctrl-C one sends SIGINT to its process group, as a terminal does.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.ship.tools import ROOT

pytestmark = pytest.mark.timeout(150)


def _workdir(output: str) -> Path:
    match = re.search(r"work directory (\S+)\)", output)
    assert match, output
    return Path(match.group(1))


def _processes_using(path: Path) -> list[str]:
    """Live processes whose command line mentions ``path`` (the control plane's and the sidecars' do)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if str(path) in cmdline and state != "Z":
            found.append(f"{proc.name}: {cmdline[:120]}")
    return found


def _start(pace: str = "0.3") -> tuple[subprocess.Popen[str], list[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.demo"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "DEMO_PACE": pace, "DEMO_MODE": "process"},
        start_new_session=True,
    )
    lines: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)

    threading.Thread(target=pump, daemon=True).start()
    return proc, lines


def test_demo_shows_the_handovers_and_cleans_up() -> None:
    proc, lines = _start()
    code = proc.wait(120)
    time.sleep(0.2)
    output = "".join(lines)
    assert code == 0, output
    assert re.search(r"pod-\w took over \d+\.\d+s after the crash", output), output
    assert re.search(r"pod-\w took over \d+\.\d+s after the SIGTERM", output), output
    # Plain kubectl get leases: the election with its leader, and one coordination Lease.
    listed = re.search(r"NAME\s+HOLDER\s+AGE\n((?:\S.*\n)+)", output)
    assert listed, output
    rows = [line.split() for line in listed.group(1).splitlines()]
    assert [r[0] for r in rows] == ["grelmicro-sidecar", "leader-demo"], output
    assert len(rows[0]) == 2 and re.fullmatch(r"pod-\w", rows[1][1]), output
    assert re.search(r"ELECTION\s+LEASE\s+HOLDER", output), output  # grelmicro-sidecar status
    assert '"is_leader": true' in output  # the state file an app reads
    workdir = _workdir(output)
    assert not workdir.exists()
    assert _processes_using(workdir) == []


def test_ctrl_c_stops_every_process_and_removes_the_files() -> None:
    # At full pace: the demo's pauses leave seconds between a leader and the end, so a
    # loaded machine still interrupts it mid-run (at 0.3, CI once sent SIGINT too late).
    proc, lines = _start(pace="1")
    deadline = time.monotonic() + 90
    while not any("LEADER" in line for line in lines):
        assert proc.poll() is None, "".join(lines)
        assert time.monotonic() < deadline, "".join(lines)
        time.sleep(0.1)
    workdir = _workdir("".join(lines))
    assert _processes_using(workdir), "the control plane and sidecars should be running now"
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
    code = proc.wait(60)
    time.sleep(0.2)
    output = "".join(lines)
    assert code == 130, output
    assert "Interrupted" in output
    assert not workdir.exists(), output
    assert _processes_using(workdir) == []
