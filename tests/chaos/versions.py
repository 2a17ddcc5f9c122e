"""An older sidecar for mixed-version chaos: the source of a past commit, cached, runnable.

Injected sidecars keep the version they were injected with until their pod
restarts, so after an injector upgrade old and new sidecars share one election
for days. ``old_sidecar()`` gives the command that runs ``grelmicro-sidecar``
as it was at ``OLD_COMMIT``.

``OLD_COMMIT`` is 9ad030b (2026-11-21 07:15 UTC): the last commit of the
project's first day, the first release of the election that landed (the
repository has no tags; the lead named it). Its runtime dependencies are
today's (``h11``, ``pyyaml``: the same ``dependencies`` line of pyproject.toml),
so no virtualenv of its own is needed: its ``sidecar`` package is extracted
with ``git archive`` into the cache (keyed by the commit, built once per
machine under a file lock) and run by this interpreter with that directory
first on ``sys.path`` (it shadows the editable install of today's package).
Needs the git history (a full clone, as CI checks out); without it the tests
that need the old version skip and say why.
"""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
from pathlib import Path

from tests.cluster.binaries import build_once, cache_base

OLD_COMMIT = "9ad030bfd07ed10c8594cc06d5a88384dcfdcd00"
REPO = Path(__file__).resolve().parents[2]

#: ``python -c`` program: today's interpreter, the old package first on the path.
_LAUNCH = "import sys; sys.path.insert(0, {tree!r}); from sidecar.cli import main; sys.exit(main())"


class Unavailable(RuntimeError):
    """The commit cannot be read here (no git, or a shallow clone without it)."""


def unavailable_reason(commit: str = OLD_COMMIT) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(REPO), "cat-file", "-e", f"{commit}^{{commit}}"],
            capture_output=True,
            text=True,
        )
    except OSError as err:
        return f"git is not available ({err}): cannot build the sidecar of {commit[:7]}"
    if done.returncode != 0:
        return (
            f"commit {commit[:7]} is not in this checkout's history (a shallow clone?): "
            f"fetch the full history (git fetch --unshallow) to run the mixed-version chaos"
        )
    return None


def old_tree(commit: str = OLD_COMMIT) -> Path:
    """The directory holding ``sidecar/`` as it was at ``commit`` (extracted once, cached)."""
    reason = unavailable_reason(commit)
    if reason is not None:
        raise Unavailable(reason)
    target = cache_base() / "old-sidecar" / commit

    def ready(path: Path) -> bool:
        return (path / "sidecar" / "cli.py").exists()

    def build(staging: Path) -> None:
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", "--format=tar", commit, "sidecar"],
            capture_output=True,
            check=True,
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(staging, filter="data")

    build_once(target, ready, build)
    return target


def old_command(commit: str = OLD_COMMIT) -> list[str]:
    """argv prefix that runs ``grelmicro-sidecar`` of ``commit`` (append ``run`` and its flags)."""
    return [sys.executable, "-c", _LAUNCH.format(tree=str(old_tree(commit)))]
