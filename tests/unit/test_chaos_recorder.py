"""The chaos recorder's roll of targets: candidates that join mid-run are sampled, and one
that leaves for good has its last file read after it is retired (real files, its own threads)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from tests.chaos.recorder import Recorder, Target
from tests.cluster import free_port


def _write(path: Path, leader: bool, at: float) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at)) + f".{int(at % 1 * 1e6):06d}Z"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"is_leader": leader, "updated_at": stamp, "valid_until": stamp}))
    tmp.replace(path)


def _target(tmp_path: Path, who: str) -> Target:
    return Target(who, tmp_path / f"{who}.json", free_port(), lambda: None)


def _until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_joiner_is_sampled_and_a_leavers_last_file_is_read_after_it_is_retired(
    tmp_path: Path,
) -> None:
    first = _target(tmp_path, "pod-0")
    _write(first.state_file, False, time.time())
    recorder = Recorder([first], probe_timeout=0.05).start()
    try:
        joiner = _target(tmp_path, "churn-0")
        recorder.add(joiner)
        _write(joiner.state_file, True, time.time())
        _until(lambda: any(v.who == "churn-0" for v in recorder.snapshot()))
        # Its last version is written as it stops, and retired at once: still recorded.
        last = time.time() + 1
        _write(joiner.state_file, False, last)
        recorder.retire("churn-0")
        _until(lambda: all(t.who != "churn-0" for t in recorder.targets))
        seen = [v for v in recorder.snapshot() if v.who == "churn-0"]
        assert [v.is_leader for v in seen] == [True, False]
        assert abs(seen[-1].updated_at - last) < 0.01
        # No longer sampled: a later write is not recorded; the others still are.
        _write(joiner.state_file, True, time.time() + 2)
        _write(first.state_file, True, time.time() + 2)
        _until(lambda: sum(v.who == "pod-0" for v in recorder.snapshot()) == 2)
        time.sleep(0.1)  # passes enough to read the other file too, were it still sampled
        assert len([v for v in recorder.snapshot() if v.who == "churn-0"]) == 2
    finally:
        recorder.stop()


def test_a_sharded_file_is_kept_per_shard_with_its_skew_taken_out(tmp_path: Path) -> None:
    now = time.time()
    stamp = lambda t: time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + "Z"  # noqa: E731
    target = _target(tmp_path, "pod-0")
    target.skew = 600.0  # its clock runs ten minutes ahead: so do the times it publishes
    ahead = now + 600
    entry = {"shard": 0, "is_leader": True, "holder": "pod-0", "fencing_token": 7}
    state = {
        "is_leader": True,
        "updated_at": stamp(ahead),
        "valid_until": None,
        "shards": [
            {**entry, "valid_until": stamp(ahead + 30), "drain": None},
            {"shard": 1, "is_leader": False, "holder": "pod-1", "valid_until": None,
             "drain": {"token": 5, "until": stamp(ahead + 1), "reason": "shard moves to pod-1"}},
        ],
    }  # fmt: skip
    target.state_file.write_text(json.dumps(state))
    recorder = Recorder([target], probe_timeout=0.05).start()
    try:
        _until(lambda: bool(recorder.snapshot()))
        (version,) = recorder.snapshot()
        assert version.shards is not None and abs(version.updated_at - now) < 1.5
        first, second = version.shards
        assert first.valid_until is not None and abs(first.valid_until - (now + 30)) < 1.5
        assert (first.fencing_token, second.is_leader, second.drain) == (7, False, 5)
        assert recorder.leader_now() == "pod-0" and recorder.owners_now() == {0: "pod-0"}
    finally:
        recorder.stop()
