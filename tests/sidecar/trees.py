"""Commands that are process trees, for ``lock`` and guard tests, and what is left of them.

``tree(script, out=path)`` is ``sh -c script`` where ``{hb}`` is the heartbeat
command (``heartbeat.py``, every 20 ms a line) and ``{out}`` a file it writes:
with ``&``, ``( … &)`` and ``setsid`` a script makes children, orphans and new
sessions. ``survivors(marker)`` are the live processes whose command line names
``marker`` (a heartbeat file, or the test's directory): what a test asserts is
empty once the tree must be gone. Test support.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import sys
from pathlib import Path

from sidecar.driver import guard

HEARTBEAT = Path(__file__).with_name("heartbeat.py")
GUARD = Path(guard.__file__)

#: the user's report (issue 27): a child that ignores SIGTERM, its shell waiting on it
TERM_IGNORING_CHILD = '(trap "" TERM; exec {hb} {out} --on-term ignore) & wait'
#: every way out of the command's process group and parentage, each ignoring SIGTERM:
#: a child in a session of its own, and an orphan (its parent exits at once)
ESCAPING = "setsid {hb} {out} --on-term ignore & ({hb} {out} --on-term ignore &); wait"


def tree(script: str, python: str = sys.executable, **files: Path) -> list[str]:
    """``sh -c script``, ``{hb}`` the heartbeat command (run by ``python``) and each
    ``{name}`` a file of ``files``."""
    quoted = {name: shlex.quote(str(path)) for name, path in files.items()}
    hb = f"{shlex.quote(python)} {shlex.quote(str(HEARTBEAT))}"
    return ["sh", "-c", script.format(hb=hb, **quoted)]


def survivors(marker: Path | str) -> list[int]:
    """PIDs of the live processes (not zombies) whose command line contains ``marker``,
    ``lock`` and its guard excepted (their command lines name the command too)."""
    needle = str(marker).encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        argv = _cmdline(int(name))
        if needle not in b" ".join(argv) or state(int(name)) in ("", "Z", "X"):
            continue
        if any(a.endswith((b"grelmicro-sidecar", b"unshare")) for a in argv[:2]):
            continue  # lock itself (or the unshare that runs it)
        if argv[3:4] == [str(GUARD).encode()]:
            continue  # python -I -S guard.py ...
        found.append(int(name))
    return found


def state(pid: int) -> str:
    """The state letter of ``pid`` in /proc (``Z`` a zombie); empty when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0].decode()
    except (OSError, IndexError):
        return ""


def describe(pid: int) -> str:
    """``pid`` for a failure message: its state letter, its parent and its command line."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            ppid = f.read().rpartition(b")")[2].split()[1].decode()
    except (OSError, IndexError):
        ppid = "?"
    argv = b" ".join(_cmdline(pid)).decode(errors="replace")
    return f"{pid} state {state(pid) or 'gone'} parent {ppid}: {argv[:160]}"


def heartbeat(out: Path) -> int:
    """The PID of the live heartbeat process writing ``out`` (exactly one)."""
    wanted = [str(HEARTBEAT).encode(), str(out).encode()]
    found = [pid for pid in survivors(out) if _cmdline(pid)[1:3] == wanted]
    assert len(found) == 1, (out, found)
    return found[0]


def _cmdline(pid: int) -> list[bytes]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def kill_survivors(marker: Path | str) -> None:
    """SIGKILL what is left (a test's clean-up: a failing test must not leave processes)."""
    for pid in survivors(marker):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def children(pid: int) -> list[int]:
    """The PIDs whose parent is ``pid`` (from /proc: this kernel may lack .../children)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                ppid = int(f.read().rpartition(b")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid:
            found.append(int(name))
    return found
