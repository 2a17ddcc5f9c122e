"""``free_port`` across processes: a port claimed by a live process is never handed out again.

A chaos run beside a bench once had a bench sidecar take a chaos sidecar's port
while that sidecar restarted; the chaos run then judged the bench's leader.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.cluster import controlplane


def test_a_port_claimed_by_a_live_process_is_refused_and_a_dead_ones_is_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(controlplane, "CLAIMS", tmp_path)
    (tmp_path / "21000").write_text(str(os.getppid()))  # a live process that is not us
    assert not controlplane._claim(21000)
    dead = subprocess.Popen(["true"])
    dead.wait()
    (tmp_path / "21001").write_text(str(dead.pid))
    assert controlplane._claim(21001)
    assert (tmp_path / "21001").read_text() == str(os.getpid())
    assert controlplane._claim(21002)  # never claimed


def test_free_port_skips_the_ports_others_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(controlplane, "CLAIMS", tmp_path)
    for port in range(20000, 30000, 2):  # every even port is another live process's
        (tmp_path / str(port)).write_text(str(os.getppid()))
    monkeypatch.setattr(controlplane, "_HANDED_OUT", set())
    assert all(controlplane.free_port() % 2 == 1 for _ in range(20))
