"""Where a benchmark's numbers come from: the machine, and the commit (and tree state) measured.

Every result file records both, so a number is never credited to a commit
that lacks it; ``bench``, ``bench.pods`` and ``bench.sweep`` share this.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def machine() -> dict[str, Any]:
    cpu = "?"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem = int(line.split()[1])
    go = "no go"
    if shutil.which("go"):
        go = subprocess.run(["go", "version"], capture_output=True, text=True).stdout.strip()
        go = go.replace("go version ", "")
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(mem / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "go": go,
    }


def source(root: Path = ROOT) -> dict[str, Any]:
    """The commit measured and whether the tree had changes on top of it.

    A result without its commit cannot be compared with a later one; a dirty
    tree is recorded so a number is never credited to a commit that lacks it.
    """

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "HEAD")
    if not commit:
        return {"commit": "unknown (not a git checkout)", "dirty": None}
    changed = git(
        "status",
        "--porcelain",
        "--untracked-files=no",
        "--",
        ".",
        ":!bench/results",
        ":!bench/RESULTS.md",
    )
    return {"commit": commit, "subject": git("log", "-1", "--format=%s"), "dirty": bool(changed)}
