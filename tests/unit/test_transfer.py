"""A planned transfer (contract §2): the leader hands over to a chosen candidate on request.

The real elector and observers as ``run`` wires them, on the fake store and
looptime's virtual clock (``test_driver``); what the apps see is read from the
real state files, every 10 ms, so an overlap of two leaders would be seen.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
from pathlib import Path
from typing import Any

import pytest

from sidecar.commands.cli import command
from sidecar.commands.transfer import transfer as move
from sidecar.core.lease import TRANSFER_ANNOTATION
from tests.unit.fake_leases import FakeLeases
from tests.unit.test_driver import LEASE, Candidate, had_sidecars, run, until


def _ask(c: Candidate, path: str, **query: str) -> tuple[int, str]:
    """What ``POST <path>?<query>`` from the pod itself gets (the route's own test: http)."""
    assert c.sidecar.published.actions is not None
    return c.sidecar.published.actions[path](query)


def _store(c: Candidate) -> Any:
    """The fake store ``c`` elects through, as ``kubectl grelmicro transfer`` would reach it."""
    return c.sidecar.elector.lock.lease.store  # type: ignore[attr-defined]


async def _three(tmp_path: Path) -> list[Candidate]:
    store = had_sidecars(FakeLeases())
    a = await Candidate("a", store, tmp_path).start()
    await until(a.leads, 16, "a leads")
    others = []
    for name in ("b", "c"):
        others.append(await Candidate(name, store, tmp_path).start())
        await asyncio.sleep(2)  # listed in join order
    return [a, *others]


class Overlaps:
    """Watches the state files every 10 ms: instants at which two candidates said they lead."""

    def __init__(self, candidates: list[Candidate]) -> None:
        self.candidates, self.seen = candidates, 0
        self.task = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        while True:
            if sum(c.leads() for c in self.candidates) > 1:
                self.seen += 1
            await asyncio.sleep(0.01)


def test_a_transfer_moves_leadership_to_the_named_candidate_at_the_acknowledgement(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        a, b, c = await _three(tmp_path)
        overlaps = Overlaps([a, b, c])
        token = a.state()["fencing_token"]
        status, line = _ask(a, "/transfer", to="b")
        assert status == 202, line
        await until(lambda: a.state().get("drain") is not None, 1, "the drain told")
        assert a.state()["drain"]["reason"] == "transfer to b"
        assert a.state()["is_leader"] is False
        await asyncio.sleep(1)
        assert not b.leads() and not c.leads(), "taken over before the drain ended"
        loop = asyncio.get_running_loop()
        acked = loop.time()
        assert _ask(a, "/drained", token=str(token))[0] == 200
        await until(b.leads, 2, "b leads after the acknowledgement")
        assert loop.time() - acked < 0.5
        assert b.state()["fencing_token"] > token
        await until(lambda: a.state().get("drain") is None, 1, "the drain over")
        await asyncio.sleep(30)  # a stays a follower: b renews
        assert b.leads() and not a.leads() and not c.leads()
        assert overlaps.seen == 0
        for x in (a, b, c):
            assert await x.stop() == 0

    run(scenario)


def test_without_a_target_or_an_acknowledgement_it_moves_at_valid_until(tmp_path: Path) -> None:
    """No ``to``: the candidate a release would name (the last listed). No acknowledgement:
    the move waits for the last valid_until, as a stopping leader's release does."""

    async def scenario() -> None:
        a, b, c = await _three(tmp_path)
        overlaps = Overlaps([a, b, c])
        loop = asyncio.get_running_loop()
        asked = loop.time()
        assert _ask(a, "/transfer")[0] == 202
        await until(c.leads, 12, "c (joined last) leads")
        assert 3 < loop.time() - asked < 11  # a renewed within the last 5 s: valid 5-10 s more
        assert not b.leads() and overlaps.seen == 0
        for x in (a, b, c):
            assert await x.stop() == 0

    run(scenario)


def test_transfers_in_a_row_each_move_leadership_to_another_pod(tmp_path: Path) -> None:
    """The bench's pattern: a transfer to "the next" every 3 s, each drain acknowledged. A
    holder handed over to counts the one that handed over as departed for a while (it
    would be, after a stop), so a release may name nobody; a transfer must still move
    leadership off this pod, not vacate the Lease and take it back itself."""

    async def scenario() -> None:
        pods = await _three(tmp_path)
        overlaps = Overlaps(pods)
        for n in range(6):
            [leader] = [p for p in pods if p.leads()]
            token = leader.state()["fencing_token"]
            status, line = _ask(leader, "/transfer")
            assert status == 202, (n, line)
            told = functools.partial(lambda c: c.state().get("drain") is not None, leader)
            await until(told, 1, "the drain told")
            assert _ask(leader, "/drained", token=str(token))[0] == 200
            moved = functools.partial(lambda c: any(p.leads() for p in pods if p is not c), leader)
            await until(moved, 3, f"move {n} made")
            await asyncio.sleep(3)
            assert not leader.leads(), f"move {n}: {leader.identity} led again"
        assert overlaps.seen == 0
        for x in pods:
            assert await x.stop() == 0

    run(scenario)


def test_the_former_leader_is_a_candidate_again(tmp_path: Path) -> None:
    async def scenario() -> None:
        a, b, c = await _three(tmp_path)
        token = a.state()["fencing_token"]
        assert _ask(a, "/transfer", to="b")[0] == 202
        await until(lambda: a.state().get("drain") is not None, 1, "the drain told")
        _ask(a, "/drained", token=str(token))
        await until(b.leads, 2, "b leads")
        assert await c.stop() == 0
        assert await b.stop() == 0  # its release names a: listed again, the only one left
        await until(a.leads, 3, "a leads again")
        assert a.state()["fencing_token"] > token
        assert await a.stop() == 0

    run(scenario)


def test_refusals_change_nothing_and_say_why(tmp_path: Path) -> None:
    async def scenario() -> None:
        a, b, c = await _three(tmp_path)
        status, line = _ask(b, "/transfer", to="c")
        assert status == 409 and "does not lead" in line and "a does" in line, line
        status, line = _ask(a, "/transfer", to="a")
        assert status == 409 and "already leads" in line, line
        status, line = _ask(a, "/transfer", to="nobody-here")
        assert status == 409 and "not a candidate" in line and "b, c" in line, line
        await asyncio.sleep(20)
        assert a.leads(), "a refused transfer moved leadership"
        assert _ask(a, "/transfer", to="b")[0] == 202
        status, line = _ask(a, "/transfer", to="c")  # before the first move has begun
        assert status == 409 and "already under way" in line, line
        await until(b.leads, 12, "b leads")
        for x in (a, b, c):
            assert await x.stop() == 0

    run(scenario)


def test_a_lone_leader_has_nobody_to_transfer_to(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = had_sidecars(FakeLeases())
        a = await Candidate("a", store, tmp_path).start()
        await until(a.leads, 16, "a leads")
        status, line = _ask(a, "/transfer")
        assert status == 409 and "no other candidate" in line, line
        assert a.leads()
        assert await a.stop() == 0

    run(scenario)


def test_kubectl_grelmicro_transfer_moves_leadership_through_the_lease(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command writes its request into the Lease for the holder's term, the holder's
    sidecar sees it on its watch and hands over, and the command says who leads now."""

    async def scenario() -> None:
        a, b, c = await _three(tmp_path)
        store = _store(a)
        assert await move(store, "main", "b", 30) == 0
        await until(b.leads, 1, "b leads")
        assert re.search(r"^main: a -> b in \d+\.\d\ds$", capsys.readouterr().out, re.M)
        for x in (a, b, c):
            assert await x.stop() == 0

    run(scenario)


def test_kubectl_grelmicro_transfer_refuses_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async def scenario() -> None:
        a, b, c = await _three(tmp_path)
        store = _store(a)
        assert await move(store, "other", None, 5) == 1
        assert await move(store, "main", "zed", 5) == 1
        assert await move(store, "main", "a", 5) == 1
        err = capsys.readouterr().err.splitlines()
        assert "no election other in namespace ns" in err[0]
        assert "zed is not a candidate of main" in err[1] and "unhealthy; listed: b, c)" in err[1]
        assert "a already leads main" in err[2]
        assert len(err) == 3
        await asyncio.sleep(20)
        assert a.leads()
        for x in (a, b, c):
            assert await x.stop() == 0

    run(scenario)


def test_kubectl_grelmicro_transfer_fails_when_leadership_does_not_move_in_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No app acknowledges, so the hand-over waits out valid_until (seconds): a command
    that waits 1 s says the leader still leads and exits 1; the move happens anyway."""

    async def scenario() -> None:
        a, b, c = await _three(tmp_path)
        store = _store(a)
        assert await move(store, "main", "b", 1) == 1
        [said] = capsys.readouterr().err.splitlines()
        assert "a still leads main after 1s: its sidecar refused" in said, said
        await until(b.leads, 15, "b leads once a's valid_until passed")
        for x in (a, b, c):
            assert await x.stop() == 0

    run(scenario)


def test_kubectl_grelmicro_transfer_fails_when_another_pod_leads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The target stops before the hand-off reaches it: another candidate leads in the end,
    and the command says who and exits 1."""

    async def scenario() -> None:
        a, b, c = await _three(tmp_path)
        store = _store(a)
        asked = asyncio.create_task(move(store, "main", "b", 60))
        await asyncio.sleep(0.5)
        assert await b.stop() == 0
        assert await asked == 1
        [said] = capsys.readouterr().err.splitlines()
        assert c.leads()  # the hand-off named b, gone: the next candidate claimed it
        assert re.search(r"main: a -> c in \d+\.\d\ds", said), said
        assert said.endswith("not to b (it did not claim the hand-off in time)"), said
        for x in (a, c):
            assert await x.stop() == 0

    run(scenario)


def test_a_request_for_an_earlier_term_moves_nothing(tmp_path: Path) -> None:
    """A request names the holder's term: one left from an earlier term is ignored."""

    async def scenario() -> None:
        a, b, c = await _three(tmp_path)
        store = _store(a)
        stale = json.dumps({"to": "b", "term": "2025-01-01T00:00:00.000000Z"})
        await store.patch(LEASE, {"metadata": {"annotations": {TRANSFER_ANNOTATION: stale}}})
        await asyncio.sleep(20)
        assert a.leads() and not b.leads()
        for x in (a, b, c):
            assert await x.stop() == 0

    run(scenario)


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["transfer"], "the following arguments are required: ELECTION"),
        (["transfer", "main", "--to"], "argument --to: expected one argument"),
        (["transfer", "main", "--timeout=soon"], "--timeout='soon' is not valid; expected"),
        (["transfer", "main", "--kubeconfig=/nonexistent"], "cannot read kubeconfig /nonexistent"),
    ],
)
def test_bad_transfer_command_lines_say_what_is_wrong_in_one_line(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert command(argv, {}) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1, err
