"""``grelmicro-sidecar lock -- CMD``: real lock processes, real commands, the real API server.

The command is ``heartbeat.py``, which appends a timestamped line every 20 ms:
when it ran is read from its file, not inferred. Contract §7 (``lock``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.cluster import ControlPlane
from tests.sidecar.proc import BIN, FAST, SidecarProcess, _parse, wait_for
from tests.sidecar.trees import (
    ESCAPING,
    GUARD,
    TERM_IGNORING_CHILD,
    children,
    kill_survivors,
    state,
    survivors,
    tree,
)

Spawn = Callable[..., SidecarProcess]
HEARTBEAT = str(Path(__file__).with_name("heartbeat.py"))
BEAT = 0.02  # heartbeat.py's period


def beats(path: Path) -> list[tuple[str, float, str]]:
    """(kind, time, token) of every line the command wrote."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        kind, at, token, *_ = line.split()
        out.append((kind, float(at), token))
    return out


def command(path: Path, *args: str) -> list[str]:
    return [sys.executable, HEARTBEAT, str(path), *args]


def lease(cluster: ControlPlane, namespace: str) -> dict[str, Any]:
    out = cluster.kubectl("get", "lease", "leader-main", "-n", namespace, "-o", "json")
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def test_the_command_runs_while_leading_and_lock_exits_with_its_code_and_releases(
    spawn: Spawn, cluster: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    out = tmp_path / "a.beats"
    a = spawn("pod-a", command=command(out, "--exit-after", "1", "--code", "7"))
    assert a.wait(30) == 7, a.raw_log()
    lines = beats(out)
    assert lines[0][0] == "start" and lines[-1][0] == "beat" and len(lines) > 10
    tokens = {token for _, _, token in lines}
    assert len(tokens) == 1 and tokens.pop().isdigit()
    started = (tmp_path / "a.beats").read_text().splitlines()[0].split()
    assert started[3].endswith("state.json")  # LEADER_ELECTION_STATE_FILE
    spec = lease(cluster, namespace)["spec"]
    assert not spec.get("holderIdentity"), spec  # released when the command exited
    # The command writes where lock writes (a container's log), not into lock's plumbing.
    assert f"heartbeat: started with fencing token {lines[0][2]}" in a.raw_log()
    assert "Traceback" not in a.raw_log()


def test_a_second_lock_runs_its_command_only_after_the_first_one_ended(
    spawn: Spawn, tmp_path: Path
) -> None:
    first, second = tmp_path / "a.beats", tmp_path / "b.beats"
    a = spawn("pod-a", command=command(first, "--exit-after", "2"))
    wait_for(lambda: beats(first), 30, what="pod-a's command")
    b = spawn("pod-b", command=command(second, "--exit-after", "0.5"))
    assert a.wait(30) == 0
    assert b.wait(30) == 0, b.raw_log()
    a_lines, b_lines = beats(first), beats(second)
    assert a_lines[-1][1] < b_lines[0][1], "pod-b's command started before pod-a's ended"
    assert int(b_lines[0][2]) > int(a_lines[0][2])  # the fencing token grew


def test_a_frozen_lock_cannot_extend_its_command_beyond_valid_until(
    spawn: Spawn, tmp_path: Path
) -> None:
    """SIGSTOP the leading lock: its guard ends the command (SIGTERM, then SIGKILL for one
    that ignores it) before the leadership lapses; the successor runs only after that."""
    first, second = tmp_path / "a.beats", tmp_path / "b.beats"
    a = spawn("pod-a", command=command(first, "--on-term", "ignore"))
    wait_for(lambda: beats(first), 30, what="pod-a's command")
    b = spawn("pod-b", command=command(second))
    time.sleep(1.0)
    a.signal(signal.SIGSTOP)
    stopped_at = time.time()
    last = a.state()
    assert last is not None and last["is_leader"]
    try:
        wait_for(lambda: beats(second), 30, what="pod-b's command")
        a_lines, b_lines = beats(first), beats(second)
        valid_until = _parse(last["valid_until"])
        ended = a_lines[-1][1]
        # SIGTERM came (and was ignored), SIGKILL ended it, all before valid_until.
        assert any(kind == "term" for kind, _, _ in a_lines), a_lines[-5:]
        assert stopped_at < ended < valid_until, (stopped_at, ended, valid_until)
        assert ended < b_lines[0][1] - 0.5, "the successor's command started too close"
    finally:
        a.signal(signal.SIGCONT)
    # Back, pod-a finds its leadership gone: exit 75 (EX_TEMPFAIL), never "leading" again.
    assert a.wait(30) == 75, a.raw_log()
    b.signal(signal.SIGTERM)
    assert b.wait(30) == 0


def test_a_signal_is_forwarded_to_the_command_and_the_lease_held_until_it_exits(
    spawn: Spawn, cluster: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    out = tmp_path / "a.beats"
    a = spawn("pod-a", command=command(out))
    wait_for(lambda: beats(out), 30, what="the command")
    a.signal(signal.SIGTERM)
    assert a.wait(30) == 0, a.raw_log()  # the command's own code after its SIGTERM
    kinds = [kind for kind, _, _ in beats(out)]
    assert kinds.count("term") == 1, kinds[-5:]
    assert not lease(cluster, namespace)["spec"].get("holderIdentity")


def test_hup_and_usr_signals_reach_the_command_and_change_nothing_else(
    spawn: Spawn, tmp_path: Path
) -> None:
    out = tmp_path / "a.beats"
    a = spawn("pod-a", command=command(out))
    wait_for(lambda: beats(out), 30, what="the command")
    for sig in (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        a.signal(sig)
        wait_for(
            lambda s=sig: any(k == s.name for k, _, _ in beats(out)),  # type: ignore[misc]
            10,
            what=f"the command to get {sig.name}",
        )
    time.sleep(0.5)
    assert a.alive and beats(out)[-1][0] == "beat"  # still running, still beating
    a.signal(signal.SIGTERM)
    assert a.wait(30) == 0, a.raw_log()


def test_a_lock_that_never_leads_ends_on_sigterm_with_128_plus_the_signal(
    spawn: Spawn, tmp_path: Path
) -> None:
    a = spawn("pod-a", command=command(tmp_path / "a.beats"))
    wait_for(lambda: beats(tmp_path / "a.beats"), 30, what="pod-a's command")
    b = spawn("pod-b", command=command(tmp_path / "b.beats"))
    wait_for(lambda: "starting" in b.messages(), 30, what="pod-b to start")
    b.signal(signal.SIGTERM)
    assert b.wait(30) == 143
    assert not (tmp_path / "b.beats").exists()
    a.signal(signal.SIGTERM)
    assert a.wait(30) == 0


def test_a_frozen_guard_does_not_keep_the_command_running_after_leadership_is_lost(
    spawn: Spawn, cluster: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """The guard is SIGSTOPped, then another holder takes the Lease: lock itself ends the
    command (SIGTERM, SIGKILL after the grace), kills the stuck guard and exits 75."""
    out = tmp_path / "a.beats"
    a = spawn(
        "pod-a", command=command(out, "--on-term", "ignore"), extra=(*FAST, "--kill-grace=500ms")
    )
    wait_for(lambda: beats(out), 30, what="the command")
    assert a.proc is not None
    guard = int(
        subprocess.run(
            ["pgrep", "-P", str(a.proc.pid), "-f", "guard.py"], capture_output=True, text=True
        ).stdout.split()[0]
    )
    os.kill(guard, signal.SIGSTOP)
    try:
        taken = time.time()
        _take_the_lease(cluster, namespace)
        assert a.wait(30) == 75, a.raw_log()
        lines = beats(out)
        assert any(kind == "term" for kind, _, _ in lines)
        assert lines[-1][1] - taken < 3.0, "the command ran on after leadership was lost"
        time.sleep(0.3)
        assert beats(out) == lines  # and it is gone, not just quiet
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(guard, signal.SIGCONT)
    assert "the guard did not report" in a.raw_log()


def test_without_state_dir_lock_uses_a_temporary_one_and_removes_it(
    cluster: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """Contract §7: no --state-dir means a temporary directory of its own, gone at exit."""
    scratch, workdir, out = tmp_path / "tmp", tmp_path / "cwd", tmp_path / "a.beats"
    scratch.mkdir()
    workdir.mkdir()
    done = subprocess.run(
        [
            str(BIN),
            "lock",
            "--election=main",
            f"--namespace={namespace}",
            f"--kubeconfig={cluster.kubeconfig}",
            *FAST,
            "--",
            *command(out, "--exit-after", "0.3"),
        ],
        cwd=workdir,
        env={**os.environ, "TMPDIR": str(scratch)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    state_file = Path(out.read_text().splitlines()[0].split()[3])
    assert state_file.parent.parent == scratch, state_file  # $TMPDIR/grelmicro-lock-*/state.json
    assert not state_file.parent.exists()  # removed at exit
    assert list(workdir.iterdir()) == []  # nothing written where it was started


# ---- the command's whole process tree (issue 27) ------------------------------------------


def guard_of(proc: SidecarProcess) -> int:
    """The PID of ``lock``'s guard (its child running guard.py)."""
    assert proc.proc is not None
    found = subprocess.run(
        ["pgrep", "-P", str(proc.proc.pid), "-f", "guard.py"], capture_output=True, text=True
    ).stdout.split()
    assert found, "lock has no guard"
    return int(found[0])


def starts(path: Path) -> int:
    return [kind for kind, _, _ in beats(path)].count("start")


def test_sigterm_to_the_leading_lock_ends_the_whole_tree_before_the_next_command_starts(
    spawn: Spawn, tmp_path: Path
) -> None:
    """Issue 27's report: the command's shell exits on the forwarded SIGTERM, its child ignores
    it. lock holds the Lease until that child is gone too (SIGKILL a grace later): the other
    lock's command starts only after it, and nothing of the tree outlives lock."""
    first, second = tmp_path / "a.beats", tmp_path / "b.beats"
    a = spawn("pod-a", command=tree(TERM_IGNORING_CHILD, out=first))
    wait_for(lambda: beats(first), 30, what="pod-a's command")
    b = spawn("pod-b", command=command(second))
    wait_for(lambda: "starting" in b.messages(), 30, what="pod-b to start")
    try:
        a.signal(signal.SIGTERM)
        assert a.wait(30) == 128 + 15, a.raw_log()  # the shell's code: SIGTERM ended it
        assert survivors(first) == [], "lock exited while its command's child ran"
        wait_for(lambda: beats(second), 30, what="pod-b's command")
        a_lines = beats(first)
        assert any(kind == "term" for kind, _, _ in a_lines)  # the child got SIGTERM first
        assert a_lines[-1][1] < beats(second)[0][1], "pod-b's command ran beside pod-a's child"
    finally:
        kill_survivors(first)
    b.signal(signal.SIGTERM)
    assert b.wait(30) == 0


@pytest.mark.parametrize("fault", [signal.SIGSTOP, signal.SIGKILL], ids=["frozen", "killed"])
def test_a_frozen_or_killed_lock_cannot_extend_any_process_of_its_command_beyond_valid_until(
    spawn: Spawn, tmp_path: Path, fault: signal.Signals
) -> None:
    """SIGSTOP or SIGKILL of the leading lock (not of its guard): nobody renews, nobody
    releases; the guard ends every process the command started (one in a session of its own,
    an orphan, both ignoring SIGTERM) before valid_until; the successor's command runs only
    after that."""
    first, second = tmp_path / "a.beats", tmp_path / "b.beats"
    a = spawn("pod-a", command=tree(ESCAPING, out=first))
    wait_for(lambda: starts(first) == 2, 30, what="pod-a's tree")
    b = spawn("pod-b", command=command(second))
    time.sleep(1.0)
    a.signal(fault)
    time.sleep(0.1)
    last = a.state()  # its last: written before the guard was told, so no earlier deadline
    assert last is not None and last["is_leader"]
    try:
        wait_for(lambda: beats(second), 30, what="pod-b's command")
        assert survivors(first) == [], "pod-a's tree runs on beside pod-b's command"
        ended = beats(first)[-1][1]
        assert ended < _parse(last["valid_until"]) and ended < beats(second)[0][1]
    finally:
        if a.alive:
            a.signal(signal.SIGCONT)
        kill_survivors(first)
    # Back, a frozen lock finds its leadership gone: exit 75 (EX_TEMPFAIL).
    assert a.wait(30) == (75 if fault == signal.SIGSTOP else -signal.SIGKILL), a.raw_log()
    b.signal(signal.SIGTERM)
    assert b.wait(30) == 0


def test_a_killed_guard_leaves_the_tree_to_lock_which_ends_it_before_releasing(
    spawn: Spawn, tmp_path: Path
) -> None:
    """SIGKILL of the guard: the command's tree re-parents to lock (a subreaper too), which
    kills all of it and releases only once it is gone; lock exits 1."""
    first, second = tmp_path / "a.beats", tmp_path / "b.beats"
    a = spawn("pod-a", command=tree(ESCAPING, out=first))
    wait_for(lambda: starts(first) == 2, 30, what="pod-a's tree")
    b = spawn("pod-b", command=command(second))
    wait_for(lambda: "starting" in b.messages(), 30, what="pod-b to start")
    try:
        os.kill(guard_of(a), signal.SIGKILL)
        assert a.wait(30) == 1, a.raw_log()
        assert survivors(first) == [], "lock released while its command's tree ran"
        wait_for(lambda: beats(second), 30, what="pod-b's command")
        assert beats(first)[-1][1] < beats(second)[0][1]
    finally:
        kill_survivors(first)
    b.signal(signal.SIGTERM)
    assert b.wait(30) == 0


def test_a_frozen_guard_and_lost_leadership_end_the_whole_tree_before_lock_exits(
    spawn: Spawn, cluster: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """The guard is SIGSTOPped, then another holder takes the Lease: lock itself ends every
    process of the tree (SIGTERM, SIGKILL after the grace), kills the stuck guard, exits 75."""
    out = tmp_path / "a.beats"
    a = spawn("pod-a", command=tree(ESCAPING, out=out), extra=(*FAST, "--kill-grace=500ms"))
    wait_for(lambda: starts(out) == 2, 30, what="the tree")
    guard = guard_of(a)
    os.kill(guard, signal.SIGSTOP)
    try:
        taken = time.time()
        _take_the_lease(cluster, namespace)
        assert a.wait(30) == 75, a.raw_log()
        assert survivors(out) == [], "lock exited while its command's tree ran"
        lines = beats(out)
        assert [kind for kind, _, _ in lines].count("term") == 2  # each one got SIGTERM first
        assert lines[-1][1] - taken < 3.0, "the tree ran on after leadership was lost"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(guard, signal.SIGCONT)
        kill_survivors(out)
    assert "the guard did not report" in a.raw_log()


def _take_the_lease(cluster: ControlPlane, namespace: str) -> None:
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    spec = {"holderIdentity": "intruder", "renewTime": now, "leaseDurationSeconds": 60}
    cluster.kubectl(
        "patch",
        "lease",
        "leader-main",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        json.dumps({"spec": spec}),
    )


def test_the_lease_is_released_only_once_what_the_command_left_behind_is_gone(
    spawn: Spawn, cluster: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """SIGTERM to the guard changes nothing (it ignores it). The command then exits 3, leaving
    a child in a session of its own and an orphan, both ignoring SIGTERM: lock exits 3, the
    Lease released, only once both are gone."""
    out = tmp_path / "a.beats"
    script = "setsid {hb} {out} --on-term ignore & ({hb} {out} --on-term ignore &); "
    script += "sleep 2; exit 3"
    a = spawn("pod-a", command=tree(script, out=out))
    wait_for(lambda: starts(out) == 2, 30, what="the tree")
    try:
        os.kill(guard_of(a), signal.SIGTERM)
        assert a.wait(30) == 3, a.raw_log()
        assert survivors(out) == [], "lock exited while what its command left behind ran"
        assert [kind for kind, _, _ in beats(out)].count("term") == 2  # each one, once
        assert not lease(cluster, namespace)["spec"].get("holderIdentity")
    finally:
        kill_survivors(out)


def _cmdline(pid: int) -> list[str]:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    return []


def _new_guard(lock: SidecarProcess, timeout: float = 30.0) -> int:
    """The PID of lock's guard as soon as it runs guard.py (polled without sleeping)."""
    assert lock.proc is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in children(lock.proc.pid):
            if str(GUARD) in _cmdline(pid):
                return pid
    raise AssertionError("lock started no guard")


def _before_the_report(
    spawn: Spawn, command: list[str], freeze_lock: bool, **kw: Any
) -> tuple[SidecarProcess, int]:
    """A leading lock and its guard, caught before the guard started the command (so before
    its PID report): the guard SIGSTOPped (``freeze_lock`` False), or lock SIGSTOPped (True;
    the caller lets it go). A catch too late (the command already started) is let go and
    tried again."""
    for attempt in range(5):
        lock = spawn(f"pod-{attempt}", command=command, **kw)
        pid = _new_guard(lock)
        assert lock.proc is not None
        frozen = lock.proc.pid if freeze_lock else pid
        os.kill(frozen, signal.SIGSTOP)
        if not children(pid):
            return lock, pid
        os.kill(frozen, signal.SIGCONT)  # too late: let it run, end it, and try again
        lock.signal(signal.SIGTERM)
        lock.wait(30)
    raise AssertionError("never caught a guard before it started the command")


def test_a_guard_that_never_reports_is_killed_and_lock_exits_126(
    spawn: Spawn, cluster: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """The guard is frozen before it reports the command's PID: lock waits 2 s at most, kills
    it and exits 126 (the command could not be started), releasing the Lease."""
    out = tmp_path / "a.beats"
    a, guard_pid = _before_the_report(spawn, command(out), freeze_lock=False)
    frozen_at = time.monotonic()
    try:
        assert a.wait(15) == 126, a.raw_log()
        assert time.monotonic() - frozen_at < 2.0 + 3.0
        assert not Path(f"/proc/{guard_pid}").exists(), "the silent guard was left behind"
        assert not out.exists()  # the command never ran
        assert "the guard did not report the command's start" in a.raw_log()
        assert not lease(cluster, namespace)["spec"].get("holderIdentity")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(guard_pid, signal.SIGCONT)
        kill_survivors(out)


def test_a_report_that_never_arrives_ends_the_guard_and_the_whole_tree_it_started(
    spawn: Spawn, cluster: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """The guard starts the command (a tree that escapes the process group and ignores
    SIGTERM) but lock never reads its PID report (taken out of lock's pipe here while lock is
    frozen). After 2 s lock kills the guard and every process of the tree, releases only once
    they are gone, and exits 126."""
    out = tmp_path / "a.beats"
    a, guard_pid = _before_the_report(spawn, tree(ESCAPING, out=out), freeze_lock=True)
    assert a.proc is not None
    try:
        report = _steal_the_report(a.proc.pid, guard_pid)
        a.signal(signal.SIGCONT)
        assert report.startswith(b"PID ")
        wait_for(lambda: starts(out) == 2, 30, what="the tree")
        assert a.wait(15) == 126, a.raw_log()
        assert survivors(out) == [], "lock released while the tree ran"
        assert not Path(f"/proc/{guard_pid}").exists(), "the silent guard was left behind"
        assert "the guard did not report the command's start" in a.raw_log()
        assert not lease(cluster, namespace)["spec"].get("holderIdentity")
    finally:
        a.signal(signal.SIGCONT)
        kill_survivors(out)


def test_a_lock_frozen_past_the_report_timeout_keeps_a_guard_that_reported(
    spawn: Spawn, tmp_path: Path
) -> None:
    """lock is frozen as its guard starts, for longer than the 2 s the report may take; the
    guard reports meanwhile. Resumed, lock reads the report before judging the guard silent:
    the command runs on. (A lease long enough that the freeze does not cost the leadership.)"""
    out = tmp_path / "a.beats"
    slow = ("--lease-duration=10s", "--renew-deadline=8s", "--retry-period=1s")
    a, guard_pid = _before_the_report(spawn, command(out), freeze_lock=True, extra=slow)
    try:
        wait_for(lambda: beats(out), 30, what="the command (its guard reported)")
        time.sleep(2.5)
    finally:
        a.signal(signal.SIGCONT)
    time.sleep(1.0)
    assert a.alive and Path(f"/proc/{guard_pid}").exists(), a.raw_log()
    assert "did not report the command's start" not in a.raw_log()
    assert time.time() - beats(out)[-1][1] < 0.5  # still beating
    a.signal(signal.SIGTERM)
    assert a.wait(30) == 0, a.raw_log()


def _steal_the_report(lock_pid: int, guard_pid: int) -> bytes:
    """Read the guard's report out of lock's end of the pipe (lock is frozen): lock never sees
    it. The guard's argv: python -I -S guard.py GRACE DEADLINE CONTROL REPORT -- ..."""
    report_fd = int(_cmdline(guard_pid)[7])
    pipe = os.readlink(f"/proc/{guard_pid}/fd/{report_fd}")
    for fd in os.listdir(f"/proc/{lock_pid}/fd"):
        with contextlib.suppress(OSError):
            flags = Path(f"/proc/{lock_pid}/fdinfo/{fd}").read_text().split("flags:")[1].split()[0]
            if os.readlink(f"/proc/{lock_pid}/fd/{fd}") == pipe and int(flags, 8) & 3 == 0:
                reader = os.open(f"/proc/{lock_pid}/fd/{fd}", os.O_RDONLY | os.O_NONBLOCK)
                break
    else:
        raise AssertionError("lock has no read end of the report pipe")
    try:
        ready, _, _ = select.select([reader], [], [], 10)
        assert ready, "the guard did not report"
        return os.read(reader, 4096)
    finally:
        os.close(reader)


@pytest.mark.skipif(
    os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("nsenter")),
    reason="a PID namespace of its own needs root, unshare and nsenter",
)
def test_lock_as_pid_1_reaps_the_orphans_that_re_parent_to_it(
    cluster: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """A container whose entrypoint is lock: lock is PID 1 of its PID namespace, so every
    orphan there becomes its child (here the background jobs of shells entered from outside,
    as ``kubectl exec`` does). lock reaps them, and still gets the guard's exit status: it
    exits with the command's code."""
    out = tmp_path / "a.beats"
    run = command(out, "--exit-after", "4", "--code", "7")
    a = SidecarProcess(tmp_path, cluster.kubeconfig, namespace, "pod-a", command=run)
    a.args[0:0] = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]
    a.start()
    assert a.proc is not None
    try:
        wait_for(lambda: beats(out), 30, what="the command")
        (init,) = children(a.proc.pid)  # lock, PID 1 inside
        for _ in range(3):
            subprocess.run(
                ["nsenter", f"--target={init}", "--pid", "--", "sh", "-c", "sleep 0.2 & exit 0"],
                check=True,
                timeout=10,
            )
        time.sleep(1.5)
        zombies = [pid for pid in children(init) if state(pid) == "Z"]
        assert zombies == [], "lock (PID 1) left its orphans as zombies"
        assert a.wait(30) == 7, a.raw_log()
    finally:
        a.stop()
        kill_survivors(out)


#: Loaded by the lock process at its start (``sitecustomize`` on its PYTHONPATH, never by the
#: guard, which runs ``-I -S``): right after the guard is spawned, before its report, one of
#: lock's tasks fails as a bug would (the long chaos run's crash was a TLS connect's fd).
CRASH = """
import asyncio, os
from sidecar.driver import command

_start = command.Command.start

async def start(self, *args, **kw):
    await _start(self, *args, **kw)
    if os.environ["CRASH_TASK"] == "lock":
        raise RuntimeError("injected: lock's supervisor fails")
    for task in asyncio.all_tasks():
        if task.get_name() == "election":
            task.cancel()  # the election loop ends, as a task with a bug does

command.Command.start = start
"""


@pytest.mark.parametrize("task", ["election", "lock"])
def test_a_task_that_fails_while_the_command_starts_ends_the_whole_tree_before_release(
    spawn: Spawn, tmp_path: Path, task: str
) -> None:
    """A failing task ends the elector (exit 1, the kubelet restarts it); the shutdown still
    ends every process of the command (a child in a session of its own and an orphan, both
    ignoring SIGTERM) before lock releases and exits: the other lock's command starts after."""
    injected = tmp_path / "crash"
    injected.mkdir()
    (injected / "sitecustomize.py").write_text(CRASH)
    path = os.pathsep.join(p for p in (str(injected), os.environ.get("PYTHONPATH")) if p)
    first, second = tmp_path / "a.beats", tmp_path / "b.beats"
    env = {"PYTHONPATH": path, "CRASH_TASK": task}
    a = spawn("pod-a", command=tree(ESCAPING, out=first), env=env)
    try:
        assert a.wait(30) != 0, a.raw_log()
        assert f"{task} task failed; exiting" in a.messages(), a.raw_log()
        assert survivors(first) == [], "lock exited while its command's tree ran"
        b = spawn("pod-b", command=command(second))
        wait_for(lambda: beats(second), 30, what="pod-b's command")
        assert not beats(first) or beats(first)[-1][1] < beats(second)[0][1]
    finally:
        kill_survivors(first)
    b.signal(signal.SIGTERM)
    assert b.wait(30) == 0
