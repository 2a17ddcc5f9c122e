"""The benchmark records the commit it measured and whether the tree was dirty."""

from __future__ import annotations

import subprocess
from pathlib import Path

from bench.provenance import source


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def test_source_names_the_commit_and_tracks_changes_outside_results(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    (tmp_path / "bench" / "results").mkdir(parents=True)
    (tmp_path / "code.py").write_text("x = 1\n")
    (tmp_path / "bench" / "RESULTS.md").write_text("old\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
    head = subprocess.run(
        ["git", "-C", str(tmp_path), "rev-parse", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()

    clean = source(tmp_path)
    assert clean == {"commit": head, "subject": "first", "dirty": False}

    (tmp_path / "bench" / "RESULTS.md").write_text("new numbers\n")
    assert source(tmp_path)["dirty"] is False, "rewriting the results must not mark the tree dirty"

    (tmp_path / "code.py").write_text("x = 2\n")
    assert source(tmp_path)["dirty"] is True


def test_source_outside_git_says_so(tmp_path: Path) -> None:
    assert source(tmp_path)["dirty"] is None
