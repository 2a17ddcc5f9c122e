"""The bench's user app (bench.apppause.APP) as a real process over a state file we write:
each kind of pause within a term is told and put down to its cause; no cluster."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.apppause import APP, _cri_line, pauses, window


def _write(path: Path, leader: bool, token: int | None, valid_for: float | None) -> None:
    now = dt.datetime.now(dt.UTC)
    until = (now + dt.timedelta(seconds=valid_for)).isoformat() if valid_for else None
    state = {
        "is_leader": leader,
        "fencing_token": token,
        "valid_until": until,
        "updated_at": now.isoformat(),
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    os.replace(tmp, path)


def _app(state: Path) -> subprocess.Popen[str]:
    env = dict(os.environ, LEADER_ELECTION_STATE_FILE=str(state))
    return subprocess.Popen([sys.executable, "-c", APP], env=env, stdout=subprocess.PIPE, text=True)


def _records(app: subprocess.Popen[str]) -> list[dict[str, Any]]:
    app.send_signal(signal.SIGTERM)  # exits at once, as PID 1 in a pod too
    out, _ = app.communicate(timeout=5)
    assert app.returncode == 0
    return [dict(json.loads(line), pod="p") for line in out.splitlines()]


def test_a_lapse_a_step_down_and_a_frozen_app_are_told_apart(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    _write(state, False, None, None)
    app = _app(state)
    time.sleep(0.3)
    _write(state, True, 5, 0.5)  # term 5, valid for 0.5 s and not renewed in time
    time.sleep(0.8)
    _write(state, True, 5, 10)  # renewed late: same term, a pause put down to the lapse
    time.sleep(0.3)
    app.send_signal(signal.SIGSTOP)  # the app not run for 0.4 s: its own loop late
    time.sleep(0.4)
    app.send_signal(signal.SIGCONT)
    time.sleep(0.3)
    _write(state, False, None, None)  # a step-down, then a new term: no pause between terms
    time.sleep(0.3)
    _write(state, True, 6, 10)
    time.sleep(0.3)
    records = _records(app)

    found = pauses(records)
    assert [(p.token, p.cause) for p in found] == [(5, "expired"), (5, "late")]
    assert 0.2 < found[0].gap < 0.6 and 0.35 < found[1].gap < 0.7
    assert [r["token"] for r in records if r["ev"] == "start"] == [5, 5, 6]
    stops = [r["reason"] for r in records if r["ev"] == "stop"]
    assert stops == ["expired", "not_leader"]
    late = [r for r in records if r["ev"] == "late"]
    assert len(late) == 1 and late[0]["acting"] and late[0]["over"] > 0.3
    summary = window(records)
    assert summary["causes"] == {"unreadable": 0, "not_leader": 0, "expired": 1, "late": 1}
    assert summary["longest_pause_s"] == round(max(p.gap for p in found), 3)


def test_an_unreadable_file_is_a_cause_of_its_own(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    _write(state, True, 3, 10)
    app = _app(state)
    time.sleep(0.3)
    state.write_text("{")  # what a torn write would show
    time.sleep(0.3)
    _write(state, True, 3, 10)
    time.sleep(0.3)
    records = _records(app)
    assert [p.cause for p in pauses(records)] == ["unreadable"]
    stop = next(r for r in records if r["ev"] == "stop")
    assert stop["error"].startswith("JSONDecodeError")


def test_the_kubelets_log_lines_give_the_apps_records() -> None:
    line = '2026-11-29T09:00:00.1Z stdout F {"ev":"late","t":1.5}'
    assert _cri_line(line) == {"ev": "late", "t": 1.5}
    assert _cri_line('2026-11-29T09:00:00.1Z stdout P {"ev":') is None
    assert _cri_line("2026-11-29T09:00:00.1Z stderr F Traceback") is None
