"""The drain against the real API server, in real processes (contract §4, issue 39 item 3).

A leader stopped while its app may run on holds its release until the last
``valid_until`` (``--release=after-valid-until``, what ``auto`` does when the
pod is not being deleted). Its app, told of the drain in the state file,
acknowledges on the sidecar's port once it has stopped acting; the follower
leads at that acknowledgement, not at the deadline, and never before it.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.moves import post
from tests.sidecar.proc import SidecarProcess, wait_for

README = Path(__file__).resolve().parents[2] / "README.md"

#: valid_until about 10 s ahead of any instant: well beyond the test's steps.
TIMING = ("--lease-duration=15s", "--renew-deadline=10s", "--retry-period=2s")

Spawn = Callable[..., SidecarProcess]


def readme_acknowledgement() -> Callable[[int], None]:
    """README's Python snippet, as a user copies it: ``acknowledge_drain(token)``."""
    [code] = [
        block
        for block in re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
        if "def acknowledge_drain" in block
    ]
    scope: dict[str, Any] = {}
    exec(compile(code, str(README), "exec"), scope)  # the README's own text, run as given
    acknowledge: Callable[[int], None] = scope["acknowledge_drain"]
    return acknowledge


def test_the_successor_leads_at_the_apps_acknowledgement_not_at_the_deadline(
    spawn: Spawn, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = spawn("pod-a", extra=(*TIMING, "--release=after-valid-until"))
    wait_for(a.leads, 30, what="pod-a to lead")
    b = spawn("pod-b", extra=TIMING)
    wait_for(lambda: b.state() is not None and b.state()["holder"] == "pod-a", 20, what="b")
    time.sleep(2.5)  # b joined the roster; a renewed: valid_until is 7.5 to 10 s ahead
    state = a.state()
    assert state is not None
    token = state["fencing_token"]
    status, line = post(a.port, f"/drained?token={token}")
    assert status == 409 and "still led" in line, line

    a.signal(signal.SIGTERM)
    wait_for(lambda: (a.state() or {}).get("drain") is not None, 5, what="the drain told")
    drain = (a.state() or {})["drain"]
    assert drain["token"] == token and drain["reason"] == "stopping", drain
    time.sleep(1.0)
    assert not b.leads(), "the follower led before the drain ended"
    assert post(a.port, f"/drained?token={token + 1}")[0] == 409
    time.sleep(0.3)
    assert not b.leads(), "a refused acknowledgement ended the drain"

    monkeypatch.setenv("LEADER_ELECTION_DRAINED_URL", f"http://127.0.0.1:{a.port}/drained")
    acked = time.monotonic()
    readme_acknowledgement()(token)  # raises unless answered 200
    wait_for(b.leads, 5, what="pod-b to lead after the acknowledgement")
    took = time.monotonic() - acked
    assert took < 2.0, f"the successor led {took:.3f} s after the acknowledgement"
    assert a.wait(10) == 0
    b_state = b.state()
    assert b_state is not None and b_state["fencing_token"] > token


def test_without_an_acknowledgement_the_release_waits_for_the_deadline(spawn: Spawn) -> None:
    a = spawn("pod-a", extra=(*TIMING, "--release=after-valid-until"))
    wait_for(a.leads, 30, what="pod-a to lead")
    b = spawn("pod-b", extra=TIMING)
    wait_for(lambda: b.state() is not None and b.state()["holder"] == "pod-a", 20, what="b")
    time.sleep(2.5)
    stopped = time.monotonic()
    a.signal(signal.SIGTERM)
    wait_for(b.leads, 20, what="pod-b to lead after the deadline")
    waited = time.monotonic() - stopped
    assert waited > 5.0, f"released {waited:.3f} s after SIGTERM, before valid_until"
    assert a.wait(10) == 0


def test_the_ack_file_ends_the_drain(spawn: Spawn, tmp_path: Path) -> None:
    """An app that only writes files: the ended term's token in ``--ack-file``, as the injector
    sets it, ends the drain; a token of an earlier term left there does not."""
    ack = tmp_path / "ack" / "drained"
    ack.parent.mkdir()
    ack.write_text("1\n")  # a leftover of an earlier term
    a = spawn("pod-a", extra=(*TIMING, "--release=after-valid-until", f"--ack-file={ack}"))
    wait_for(a.leads, 30, what="pod-a to lead")
    b = spawn("pod-b", extra=TIMING)
    wait_for(lambda: b.state() is not None and b.state()["holder"] == "pod-a", 20, what="b")
    time.sleep(2.5)
    token = (a.state() or {})["fencing_token"]
    a.signal(signal.SIGTERM)
    wait_for(lambda: (a.state() or {}).get("drain") is not None, 5, what="the drain told")
    time.sleep(1.0)
    assert not b.leads(), "a leftover acknowledgement ended the drain"
    written = time.monotonic()
    tmp = ack.with_suffix(".tmp")
    tmp.write_text(f"{token}\n")
    os.replace(tmp, ack)
    wait_for(b.leads, 5, what="pod-b to lead after the file's acknowledgement")
    took = time.monotonic() - written
    assert took < 2.0, f"the successor led {took:.3f} s after the file was written"
    assert a.wait(10) == 0
