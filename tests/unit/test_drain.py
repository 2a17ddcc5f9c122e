"""The drain (contract §4): a stopping leader's app may end the wait for ``valid_until`` early.

The real elector and observers as ``run`` wires them, on the fake store and
looptime's virtual clock (``test_driver``); what the app sees is read from the
real state file. The HTTP route itself: ``test_status_server``; a real process
on the real API server: ``tests/sidecar/test_drain.py``.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from sidecar.driver.drain import Drain
from sidecar.driver.observer import View
from sidecar.kit.logs import Logger
from tests.unit.fake_leases import FakeLeases
from tests.unit.test_driver import Candidate, had_sidecars, run, until
from tests.unit.test_status_server import LEADER

#: The election's renew deadline (``test_driver.settings``): what a leader's valid_until spans.
RENEW_DEADLINE = 10.0


def _drain(c: Candidate) -> Drain:
    return c.sidecar.published.drain


def _drains(c: Candidate) -> dict[str, float]:
    """``grelmicro_sidecar_drains_total`` by ``ended``, as ``/metrics`` serves it."""
    prefix = 'grelmicro_sidecar_drains_total{name="leader-main",ended="'
    return {
        line[len(prefix) :].split('"')[0]: float(line.rsplit(" ", 1)[1])
        for line in c.sidecar.metrics.render().splitlines()
        if line.startswith(prefix)
    }


async def _leader_and_follower(tmp_path: Path) -> tuple[Candidate, Candidate]:
    store = had_sidecars(FakeLeases())
    a = await Candidate("a", store, tmp_path, release="after-valid-until").start()
    await until(a.leads, 16, "a leads")
    b = await Candidate("b", store, tmp_path).start()
    await asyncio.sleep(3)  # b has joined the roster; a renewed: valid_until ~8-10 s ahead
    return a, b


def test_an_acknowledged_drain_releases_at_the_acknowledgement(tmp_path: Path) -> None:
    """The app is told the drain (its term's token, the deadline) before the release waits on
    it; its acknowledgement lets the successor lead in well under a second, not at the
    deadline; and never before it: b does not lead while the drain is unacknowledged."""

    async def scenario() -> None:
        a, b = await _leader_and_follower(tmp_path)
        token, until_ = a.state()["fencing_token"], a.state()["valid_until"]
        stopping = asyncio.create_task(a.stop())
        await until(lambda: a.state().get("drain") is not None, 2, "the drain told")
        assert a.state()["drain"] == {"token": token, "until": until_, "reason": "stopping"}
        assert a.state()["is_leader"] is False
        await asyncio.sleep(2)
        assert not b.leads(), "a successor led before the drain ended"
        loop = asyncio.get_running_loop()
        acked = loop.time()
        assert _drain(a).acknowledge(str(token))[0] == 200
        await until(b.leads, 2, "b leads after the acknowledgement")
        assert loop.time() - acked < 0.5
        assert await stopping == 0
        assert _drains(a) == {"acknowledged": 1, "deadline": 0}
        await b.stop()

    run(scenario)


def test_an_unacknowledged_drain_releases_at_the_deadline(tmp_path: Path) -> None:
    """An app that ignores the drain behaves as before: the release waits out valid_until."""

    async def scenario() -> None:
        a, b = await _leader_and_follower(tmp_path)
        loop = asyncio.get_running_loop()
        stopped = loop.time()
        stopping = asyncio.create_task(a.stop())
        await until(b.leads, RENEW_DEADLINE + 3, "b leads after a's deadline")
        waited = loop.time() - stopped
        assert RENEW_DEADLINE - 3.5 < waited < RENEW_DEADLINE + 1, waited
        assert await stopping == 0
        assert _drains(a) == {"acknowledged": 0, "deadline": 1}
        await b.stop()

    run(scenario)


def test_an_acknowledgement_counts_only_for_the_ended_term_it_names(tmp_path: Path) -> None:
    """No token, another term's, or the term still led: refused, and the drain goes on. A late
    acknowledgement of an earlier term never cuts short the drain of the next."""

    async def scenario() -> None:
        a, b = await _leader_and_follower(tmp_path)
        drain, token = _drain(a), a.state()["fencing_token"]
        assert drain.acknowledge(None)[0] == 400
        assert drain.acknowledge("x1")[0] == 400
        assert drain.acknowledge("¹")[0] == 400  # a digit to str.isdigit, not to int()
        status, line = drain.acknowledge(str(token))
        assert status == 409 and "still led" in line
        assert drain.acknowledge(str(token - 1))[0] == 409
        stopping = asyncio.create_task(a.stop())
        await until(lambda: a.state().get("drain") is not None, 2, "the drain told")
        assert drain.acknowledge(str(token + 1))[0] == 409
        await asyncio.sleep(3)
        assert not b.leads(), "a refused acknowledgement ended the drain"
        assert drain.acknowledge(str(token))[0] == 200
        assert drain.acknowledge(str(token))[0] == 200  # the same again changes nothing
        await until(b.leads, 2, "b leads after the acknowledgement")
        assert await stopping == 0
        await b.stop()

    run(scenario)


def test_an_acknowledgement_before_the_notice_counts(tmp_path: Path) -> None:
    """An app that stops on "not leader" may acknowledge before the drain is told: the
    release then goes out without waiting at all."""

    async def scenario() -> None:
        a, b = await _leader_and_follower(tmp_path)
        token = a.state()["fencing_token"]
        stopping = asyncio.create_task(a.stop())
        await until(lambda: a.state()["is_leader"] is False, 2, "not leader told")
        assert _drain(a).acknowledge(str(token))[0] == 200
        await until(b.leads, 2, "b leads")
        assert await stopping == 0
        assert _drains(a)["deadline"] == 0  # (counted acknowledged if the notice came first)
        await b.stop()

    run(scenario)


def test_a_drain_is_acknowledged_by_the_ack_file_naming_the_ended_term(tmp_path: Path) -> None:
    """For an app that only reads and writes files: the ended term's token written into the
    ack file ends the drain. A leftover token of an earlier term, or anything not a token,
    does not: the drain goes on to its deadline or a valid acknowledgement."""

    async def scenario() -> None:
        a, b = await _leader_and_follower(tmp_path)
        ack_file = tmp_path / "ack" / "drained"
        _drain(a).ack_file = ack_file  # the wiring's --ack-file
        token = a.state()["fencing_token"]
        stopping = asyncio.create_task(a.stop())
        await until(lambda: a.state().get("drain") is not None, 2, "the drain told")
        await asyncio.sleep(1)  # no file yet
        ack_file.parent.mkdir()
        ack_file.write_text(f"{token - 1}\n")  # an earlier term's
        await asyncio.sleep(1)
        ack_file.write_text("stopped\n")
        await asyncio.sleep(1)
        assert not b.leads(), "the drain ended without the ended term's token"
        loop = asyncio.get_running_loop()
        written = loop.time()
        ack_file.write_text(f"{token}\n")
        await until(b.leads, 2, "b leads after the file's acknowledgement")
        assert loop.time() - written < 0.5
        assert await stopping == 0
        await b.stop()

    run(scenario)


def test_leading_again_forgets_what_was_acknowledged_before() -> None:
    """An acknowledgement says the app stopped acting then; once this sidecar leads again,
    even under the same token, the app may act again, so a later drain waits anew."""
    leader = dataclasses.replace(LEADER, fencing_token=7)
    drain = Drain(Logger("error"))
    drain.on_state(View(leader, None, None))
    drain.on_state(
        View(dataclasses.replace(leader, is_leader=False, fencing_token=None), None, None)
    )
    assert drain.acknowledge("7")[0] == 200 and drain.acknowledged
    drain.on_state(View(leader, None, None))
    assert not drain.acknowledged
    assert drain.acknowledge("7")[0] == 409  # led again: nothing to end
