"""The state dir unwritable (read-only filesystem) or full (ENOSPC), at start and while leading.

Needs root to mount small tmpfs filesystems (skipped otherwise). Permission
bits cannot stand for "unwritable" here: root writes through them; a
read-only mount is what a ``readOnlyRootFilesystem`` pod without an emptyDir
actually gives. Already covered: a state dir under a regular file.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.chaos.checker import parse_ts
from tests.cluster import ControlPlane
from tests.sidecar.proc import BIN, SidecarProcess, wait_for

Spawn = Callable[..., SidecarProcess]


@contextlib.contextmanager
def tmpfs(path: Path, options: str) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    out = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True
    )
    if out.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({out.stderr.strip()}); needs root")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(directory: Path, name: str = "filler") -> Path:
    """Write until the filesystem is full; the filler file."""
    filler = directory / name
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"\0" * 512)
    finally:
        os.close(fd)
    return filler


def run_once(cluster: ControlPlane, state_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(BIN),
            "run",
            "--election=main",
            f"--kubeconfig={cluster.kubeconfig}",
            "--namespace=default",
            f"--state-dir={state_dir}",
            "--port=0",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )


def last_line(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 1, (out.returncode, out.stderr)
    assert "Traceback" not in out.stderr, out.stderr
    return out.stderr.strip().splitlines()[-1]


def test_read_only_state_dir_exits_1_naming_it_and_the_fix(
    cluster: ControlPlane, tmp_path: Path
) -> None:
    with tmpfs(tmp_path / "ro", "ro,size=64k") as ro:
        line = last_line(run_once(cluster, ro))
        assert str(ro) in line and "not writable" in line and "emptyDir" in line, line
        line = last_line(run_once(cluster, ro / "sub"))  # and when it must be created there
        assert str(ro / "sub") in line and "cannot be created" in line and "Read-only" in line, line


def test_full_state_dir_at_start_exits_1_naming_the_file(
    cluster: ControlPlane, tmp_path: Path
) -> None:
    with tmpfs(tmp_path / "full", "size=16k") as full:
        fill(full)
        line = last_line(run_once(cluster, full))
        assert str(full / "state.json") in line and "No space left on device" in line, line
        assert not (full / "state.json").exists()
        assert [p.name for p in full.iterdir()] == ["filler"], "no temporary file left behind"


def test_state_dir_filling_up_while_leading(spawn: Spawn, tmp_path: Path) -> None:
    a = spawn("pod-a", start=False)
    with tmpfs(a.state_dir, "size=16k"):
        a.start()
        wait_for(a.leads, 15, what="leadership")
        filler = fill(a.state_dir)
        full_at = time.time()
        # The error is logged once, with what readers must do, and the sidecar keeps going.
        wait_for(
            lambda: any("cannot write" in str(r.get("msg")) for r in a.logs()),
            5,
            what="the state-file error in the log",
        )
        stale = a.state()
        assert stale is not None and stale["is_leader"] is True
        vouched = parse_ts(stale["valid_until"])
        assert vouched is not None and vouched <= full_at + 2.0 + 0.05  # renew deadline 2 s
        time.sleep(max(0.0, vouched - time.time()) + 1.0)
        # The stale file's claim has run out for any reader honouring valid_until...
        assert a.state() == stale and not a.leads()
        # ... while the sidecar, alive and still leading, says so over HTTP.
        assert a.alive and a.http("/healthz")[0] == 200
        wait_for(
            lambda: a.http("/leader")[0] == 200, 3, what="/leader 200 (HTTP does not need the disk)"
        )
        errors = [r for r in a.logs() if "cannot write" in str(r.get("msg"))]
        assert len(errors) == 1, errors
        assert "No space left on device" in errors[0]["msg"] and "valid_until" in errors[0]["msg"]
        assert [p.name for p in a.state_dir.iterdir() if p.name.startswith(".")] == [], (
            "no temp file left"
        )

        filler.unlink()  # space again: the next renew rewrites the file
        wait_for(a.leads, 5, what="the state file to be rewritten once there is space")
        assert "Traceback" not in a.raw_log()
        a.stop()
