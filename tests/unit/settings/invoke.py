"""A command run in this process, as its console script would run it: exit code, stdout, stderr.

``cli.command`` is what ``grelmicro-sidecar`` runs after holding its signals,
with the env variables given here instead of the process's. Nothing here
starts a process or a cluster: every case stops at its settings (or at a
kubeconfig that does not exist) before any connection.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Mapping
from dataclasses import dataclass

from sidecar.commands.cli import command


@dataclass(frozen=True)
class Outcome:
    returncode: int
    stdout: str
    stderr: str


def invoke(argv: list[str], environ: Mapping[str, str] | None = None) -> Outcome:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = command(argv, dict(environ or {}))
    return Outcome(code, out.getvalue(), err.getvalue())


def one_line(out: Outcome, code: int = 2) -> str:
    """contract §7: the exit code, and one line on stderr without a traceback."""
    assert out.returncode == code, (out.returncode, out.stderr[-2000:])
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    return lines[0]
