"""The guard of ``lock`` as a real process, on its own: the command ends by the deadline whatever ``lock`` does.

Run exactly as ``lock`` runs it (``python -I -S guard.py GRACE DEADLINE CONTROL
REPORT -- CMD``), with the pipes made here, so the test plays ``lock``: it can
die at any moment, before it read the guard's report too.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from sidecar.driver import guard, orphans
from tests.sidecar.proc import wait_for
from tests.sidecar.trees import ESCAPING, heartbeat, kill_survivors, state, survivors, tree

GUARD = Path(guard.__file__)


def _start(
    tmp_path: Path,
    deadline_in: float,
    command: list[str] | None = None,
    grace: float = 0.2,
    run_as: list[str] = [sys.executable],  # noqa: B006 (never changed)
) -> tuple[subprocess.Popen[bytes], int, int, Path]:
    """A guard running ``command`` (default: ``sleep 60`` that records its PID); (guard,
    control w, report r, pid file). ``run_as``: how the guard's Python is started.

    Its stderr (which the command shares) goes to ``tmp_path/stderr``.
    """
    control_r, control_w = os.pipe()
    report_r, report_w = os.pipe()
    pid_file = tmp_path / "pid"
    command = command or ["sh", "-c", f"echo $$ > {pid_file}; exec sleep 60"]
    proc = subprocess.Popen(
        [
            *run_as, "-I", "-S", str(GUARD),
            str(grace), str(time.monotonic() + deadline_in), str(control_r), str(report_w),
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


def test_a_guard_that_runs_only_after_its_deadline_never_starts_the_command(
    tmp_path: Path,
) -> None:
    """The guard was starved (a loaded node) and gets to run only after the leadership it was
    started for has ended: it must not start the command then, not even for a moment (a long
    chaos run saw one start 18 s after its deadline, beside the next leader's). It exits with
    ``lock``'s "leadership lost" code and reports no start."""
    ran = tmp_path / "ran"
    proc, control_w, report_r, _ = _start(tmp_path, -0.5, ["sh", "-c", f"touch {ran}"])
    try:
        code = proc.wait(timeout=10)
        os.set_blocking(report_r, False)
        assert os.read(report_r, 100) == b"", "the command was started"
        assert not ran.exists(), "the command ran after its deadline"
        assert code == guard.LATE_EXIT
        assert "Traceback" not in (tmp_path / "stderr").read_text()
    finally:
        os.close(control_w)
        os.close(report_r)


def _lines(path: Path) -> list[tuple[str, float]]:
    """(kind, time) of each complete line a heartbeat wrote."""
    out = []
    for line in path.read_text().splitlines() if path.exists() else []:
        parts = line.split()
        if len(parts) >= 3:
            out.append((parts[0], float(parts[1])))
    return out


def _started(*paths: Path) -> None:
    wait_for(lambda: all(_lines(p) for p in paths), 10, what="every heartbeat to start")


def test_what_the_command_leaves_behind_is_ended_before_the_guard_reports_its_end(
    tmp_path: Path,
) -> None:
    """The command exits 3 and leaves two children that ignore SIGTERM: one in a session of
    its own, one orphan. The guard (their subreaper) gives each one SIGTERM, SIGKILL a grace
    later, and exits with the command's 3 only once none is left."""
    own, orphan = tmp_path / "own-session.beats", tmp_path / "orphan.beats"
    script = "setsid {hb} {own} --on-term ignore & ({hb} {orphan} --on-term ignore &); "
    script += "sleep 1; exit 3"
    proc, _control_w, _report_r, _ = _start(tmp_path, 60.0, tree(script, own=own, orphan=orphan))
    try:
        _started(own, orphan)
        code = proc.wait(10)
        ended = time.time()
        assert survivors(tmp_path) == [], "the guard exited while what the command started ran"
        assert code == 3
        for path in (own, orphan):
            kinds = [kind for kind, _ in _lines(path)]
            assert kinds.count("term") == 1, (path.name, kinds[-5:])  # SIGTERM first, once
            assert _lines(path)[-1][1] < ended
    finally:
        kill_survivors(tmp_path)


def test_at_the_deadline_every_process_the_command_started_is_gone_a_frozen_one_too(
    tmp_path: Path,
) -> None:
    """The command's shell ignores SIGTERM and waits; it started a child in a session of its
    own (frozen here by SIGSTOP) and an orphan, both ignoring SIGTERM. A grace before the
    deadline each gets SIGTERM (and SIGCONT: the frozen one handles it), at the deadline
    SIGKILL; the guard exits then, 128 + 9, with nothing left."""
    own, orphan = tmp_path / "own-session.beats", tmp_path / "orphan.beats"
    script = 'trap "" TERM; setsid {hb} {own} --on-term ignore & '
    script += "({hb} {orphan} --on-term ignore &); wait"
    deadline = time.time() + 3.0
    proc, _control_w, _report_r, _ = _start(tmp_path, 3.0, tree(script, own=own, orphan=orphan))
    try:
        _started(own, orphan)
        os.kill(heartbeat(own), signal.SIGSTOP)
        code = proc.wait(10)
        ended = time.time()
        assert survivors(tmp_path) == [], "the deadline passed with the command's tree running"
        assert code == 128 + 9
        assert ended - deadline < 1.0
        for path in (own, orphan):
            lines = _lines(path)
            assert [kind for kind, _ in lines].count("term") == 1, (path.name, lines[-5:])
            assert lines[-1][1] < deadline + 0.1, (path.name, lines[-1][1] - deadline)
    finally:
        kill_survivors(tmp_path)


def test_stop_ends_every_process_the_command_started_within_the_grace(tmp_path: Path) -> None:
    """STOP (leadership lost): the shell, a child in a session of its own and an orphan (both
    ignoring SIGTERM) each get one SIGTERM at once and SIGKILL a grace later."""
    out = tmp_path / "tree.beats"
    proc, control_w, _report_r, _ = _start(tmp_path, 60.0, tree(ESCAPING, out=out), grace=0.3)
    try:
        wait_for(
            lambda: [k for k, _ in _lines(out)].count("start") == 2, 10, what="both heartbeats"
        )
        stopped = time.monotonic()
        os.write(control_w, b"STOP\n")
        code = proc.wait(10)
        took = time.monotonic() - stopped
        assert survivors(tmp_path) == [], "STOP left some of the command's tree running"
        assert code == 128 + 15  # the shell: SIGTERM ended it
        assert took < 0.3 + 1.0
        assert [kind for kind, _ in _lines(out)].count("term") == 2  # each one, once
    finally:
        kill_survivors(tmp_path)


#: the product image's user, with every capability dropped and no way to gain one
UNPRIVILEGED = [
    "setpriv", "--reuid=65532", "--regid=65532", "--clear-groups",
    "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs",
]  # fmt: skip


def _unprivileged_python() -> str | None:
    """A Python that user 65532 can run (this one may live under /root), or None."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        return None
    for python in (sys.executable, "/usr/bin/python3"):
        check = [*UNPRIVILEGED, "sh", "-c", 'exec "$0" -I -S -c pass', python]
        done = subprocess.run(check, check=False, capture_output=True)
        if done.returncode == 0:
            return python
    return None


def test_the_guard_owns_the_whole_tree_as_an_unprivileged_user_without_capabilities(
    tmp_path: Path,
) -> None:
    """As in a restricted pod (UID 65532, no capability, no_new_privs): the guard still becomes
    the tree's subreaper, and STOP ends a child in a session of its own and an orphan."""
    python = _unprivileged_python()
    if python is None:
        pytest.skip("needs root (to become UID 65532), setpriv and a Python that user can run")
    shared = Path(tempfile.mkdtemp(prefix="grelmicro-guard-"))  # tmp_path's parents are 0700
    shared.chmod(0o777)
    out = shared / "tree.beats"
    proc, control_w, _report_r, _ = _start(
        tmp_path, 60.0, tree(ESCAPING, python=python, out=out), run_as=[*UNPRIVILEGED, python]
    )
    try:
        wait_for(
            lambda: [k for k, _ in _lines(out)].count("start") == 2, 10, what="both heartbeats"
        )
        assert {_uid(pid) for pid in survivors(out)} == {65532}
        os.write(control_w, b"STOP\n")
        assert proc.wait(10) == 128 + 15
        assert survivors(out) == [], "STOP left some of the command's tree running"
    finally:
        kill_survivors(out)
        shutil.rmtree(shared, ignore_errors=True)


def _uid(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("Uid:")[1].split()[0])


LONE_THREAD = Path(__file__).with_name("lonethread.py")


def _lone_thread(out: Path) -> int:
    """The PID ``lonethread.py`` wrote to ``out`` once its main thread had exited."""
    first = wait_for(
        lambda: out.exists() and out.read_text().partition("\n")[0], 10, what="lonethread's PID"
    )
    return int(first.split()[1])


def _runs(pid: int) -> bool:
    """Whether a thread of ``pid`` runs (its main thread may have exited), from /proc."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return False
    for tid in tids:
        with (
            contextlib.suppress(FileNotFoundError),
            open(f"/proc/{pid}/task/{tid}/stat", "rb") as f,
        ):
            if f.read().rpartition(b")")[2].split()[0] not in (b"Z", b"X"):
                return True
    return False


def test_a_process_whose_main_thread_exited_is_ended_like_any_other(tmp_path: Path) -> None:
    """The command leaves behind a process whose main thread called pthread_exit: /proc shows it
    ``Z`` while its other thread runs on (ignoring SIGTERM). The guard must not take it for a
    zombie (issue 38): it gets SIGTERM and SIGKILL like any process of the tree, and the guard
    exits with the command's 3 only once it is gone."""
    out = tmp_path / "lone.beats"
    script = (
        f"{sys.executable} {LONE_THREAD} {out} & until [ -s {out} ]; do sleep 0.02; done; exit 3"
    )
    proc, _control_w, _report_r, _ = _start(tmp_path, 60.0, ["sh", "-c", script])
    pid = _lone_thread(out)
    try:
        assert state(pid) == "Z" and _runs(pid)  # what the guard sees, and the truth
        wait_for(lambda: proc.poll() is not None, 5, what="the guard to end the lone thread")
        ended = time.time()
        assert not _runs(pid), "the guard exited while a process of the tree ran"
        assert proc.returncode == 3
        assert float(out.read_text().split()[-1]) < ended
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        proc.kill()
        proc.wait(10)


def test_lock_counts_a_process_whose_main_thread_exited_as_alive(tmp_path: Path) -> None:
    """``lock`` releases the Lease once ``alive`` finds nothing of its tree: a process whose main
    thread exited (``Z`` in /proc) while another thread runs is part of what is left."""
    out = tmp_path / "lone.beats"
    child = subprocess.Popen([sys.executable, str(LONE_THREAD), str(out)])
    try:
        assert _lone_thread(out) == child.pid and _runs(child.pid)
        assert child.pid in orphans.alive(os.getpid())
    finally:
        child.kill()
        child.wait(10)
