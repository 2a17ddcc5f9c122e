"""Shards (contract §2, shards): N shards balanced over the pods, each move a hand-off.

The real electors, board and members as ``run --shards`` wires them
(``commands.wiring.wire_shards``), on the fake store and looptime's virtual
clock; what each app sees is read from its real state file every 10 ms, so a
shard owned twice in the apps' view would be seen.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import io
import json
import types
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sidecar.commands.cli import command
from sidecar.commands.wiring import wire_shards
from sidecar.core.election import Event
from sidecar.core.lease import LeaseRecord
from sidecar.core.shards import assign, shard_lease
from sidecar.core.timing import Timing
from sidecar.driver.drain import Drain
from sidecar.driver.report import LogReport
from sidecar.driver.shardboard import MOVE, ShardBoard
from sidecar.driver.shardset import ShardSet
from sidecar.kit.logs import Logger
from sidecar.kube.errors import ApiUnavailable
from tests.unit.fake_leases import FakeLeases
from tests.unit.test_driver import LEASE, LoopClock, had_sidecars, run, settings, until

SHARDS = 12


class Pod:
    """One pod's sidecar with ``--shards``, and what its app reads."""

    def __init__(
        self,
        identity: str,
        store: FakeLeases,
        tmp: Path,
        shards: int = SHARDS,
        release: str = "now",
    ) -> None:
        self.identity = identity
        base = settings(identity, tmp / identity, release=release)
        base = dataclasses.replace(base, shards=shards)
        self.sidecar = wire_shards(
            base,
            "ns",
            store,
            Logger("error"),
            clock=LoopClock(),  # type: ignore[arg-type]
        )
        self.state_path = tmp / identity / "state.json"
        self.task: asyncio.Task[int] | None = None

    async def start(self) -> Pod:
        await self.sidecar.elector.start()
        self.task = asyncio.create_task(self.sidecar.elector.run())
        return self

    def state(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.state_path.read_text())
        return data

    def owns(self) -> set[int]:
        """The shards a careful app acts on: ``is_leader`` and ``valid_until`` ahead."""
        now = LoopClock().wall()
        return {
            s["shard"]
            for s in self.state().get("shards") or []
            if s["is_leader"] and dt.datetime.fromisoformat(s["valid_until"]) > now
        }

    def crash(self) -> None:
        """As SIGKILL: every task ends where it is; nothing more is written, nobody told."""
        shards = self.sidecar.elector
        assert isinstance(shards, ShardSet) and self.task is not None
        members = shards.board.members
        for task in [self.task, *shards.runs, *members._tasks, *members._heart]:
            task.cancel()
        for elector in shards.electors:
            for task in elector._tasks:
                task.cancel()

    async def stop(self) -> int:
        self.sidecar.elector.stop()
        assert self.task is not None
        return await self.task


class Owners:
    """Every 10 ms, what each pod's app acts on: a shard acted on by two is counted."""

    def __init__(self, pods: list[Pod]) -> None:
        self.pods, self.twice = pods, 0
        self.task = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        while True:
            seen = Counter(s for p in self.pods for s in p.owns())
            self.twice += sum(1 for n in seen.values() if n > 1)
            await asyncio.sleep(0.01)

    def now(self) -> dict[int, str]:
        return {s: p.identity for p in self.pods for s in p.owns()}


def _balanced(pods: list[Pod], shards: int = SHARDS) -> bool:
    counts = [len(p.owns()) for p in pods]
    return sum(counts) == shards and max(counts) - min(counts) <= 1


def test_three_pods_own_four_shards_each_and_a_fourth_takes_exactly_three(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = had_sidecars(FakeLeases())
        pods = [await Pod(name, store, tmp_path).start() for name in ("a", "b", "c")]
        owners = Owners(pods)
        await until(lambda: _balanced(pods), 60, "12 shards balanced over 3 pods")
        assert sorted(len(p.owns()) for p in pods) == [4, 4, 4]
        assert set(store.objects) >= {shard_lease(LEASE, i) for i in range(SHARDS)}
        await asyncio.sleep(20)  # steady: nothing moves
        before = owners.now()
        d = await Pod("d", store, tmp_path).start()
        pods.append(d)
        owners.pods = pods
        await until(lambda: _balanced(pods), 60, "12 shards balanced over 4 pods")
        after = owners.now()
        moved = {s for s in range(SHARDS) if before[s] != after[s]}
        assert len(moved) == 3 and all(after[s] == "d" for s in moved), (
            sorted(before.items()),
            sorted(after.items()),
        )
        assert owners.twice == 0
        for p in pods:
            assert await p.stop() == 0

    run(scenario)


def test_a_stopping_pod_hands_its_shards_to_the_others_at_once(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = had_sidecars(FakeLeases())
        pods = [await Pod(name, store, tmp_path).start() for name in ("a", "b", "c")]
        owners = Owners(pods)
        await until(lambda: _balanced(pods), 60, "balanced over 3 pods")
        loop = asyncio.get_running_loop()
        stopped = loop.time()
        assert await pods[2].stop() == 0
        rest = pods[:2]
        await until(lambda: _balanced(rest), 12, "the 4 shards of the stopped pod taken")
        assert loop.time() - stopped < 12  # the drain waits out valid_until (no app acks here)
        assert sorted(len(p.owns()) for p in rest) == [6, 6]
        assert owners.twice == 0
        for p in rest:
            assert await p.stop() == 0

    run(scenario)


def test_pods_stopping_together_name_only_members_that_stay(tmp_path: Path) -> None:
    """A rollout stops old pods within moments of each other. A stopping pod's releases,
    which go out after its app's drain, name members still alive then, never a pod that
    stopped since: that one would not claim, and the shard would wait out the hand-off's
    fallback, then, taken by a pod that started after its claim, a lease duration more
    (seen in real pods: 9.8 s)."""

    async def scenario() -> None:
        store = had_sidecars(FakeLeases())
        pods = [await Pod(name, store, tmp_path).start() for name in ("a", "b", "d")]
        # c releases at valid_until, as a pod whose app acknowledges no drain does.
        pods.insert(2, await Pod("c", store, tmp_path, release="after-valid-until").start())
        owners = Owners(pods)
        await until(lambda: _balanced(pods), 60, "balanced over 4 pods")
        since, shards = store.rv, {shard_lease(LEASE, i) for i in range(SHARDS)}
        c_stops = asyncio.create_task(pods[2].stop())
        await asyncio.sleep(0.1)
        assert await pods[3].stop() == 0
        assert await c_stops == 0
        rest = pods[:2]
        await until(lambda: _balanced(rest), 30, "the stopped pods' 6 shards taken")
        written = [
            (obj["metadata"]["name"], LeaseRecord.from_object(obj).holder)
            for version, kind, obj in store.history
            if version > since and kind != "DELETED" and obj["metadata"]["name"] in shards
        ]
        assert written and all(holder in ("a", "b") for _, holder in written), written
        assert owners.twice == 0
        for p in rest:
            assert await p.stop() == 0

    run(scenario)


def test_a_crashed_pods_shards_are_taken_after_their_lease(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = had_sidecars(FakeLeases())
        pods = [await Pod(name, store, tmp_path).start() for name in ("a", "b", "c")]
        owners = Owners(pods)
        await until(lambda: _balanced(pods), 60, "balanced over 3 pods")
        pods[2].crash()
        rest = pods[:2]
        owners.pods = rest
        await until(lambda: _balanced(rest), 45, "the crashed pod's shards taken")
        assert owners.twice == 0

    run(scenario)


def test_one_shard_is_one_election_with_a_shard_lease(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = had_sidecars(FakeLeases())
        pods = [await Pod(name, store, tmp_path, shards=2).start() for name in ("a", "b")]
        await until(lambda: _balanced(pods, 2), 60, "2 shards over 2 pods")
        assert [len(p.owns()) for p in pods] == [1, 1]
        for p in pods:
            assert await p.stop() == 0

    run(scenario)


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--shards=0"], "from 1 to 64"),
        (["--shards=65"], "from 1 to 64"),
        (["--shards=¹"], "from 1 to 64"),  # a digit to str.isdigit, not to int()
        (["--shards=12", "--label-leader"], "cannot be used with --shards"),
        (["--shards=12", "--ack-file=/tmp/a"], "POST /drained?shard=<i>&token="),
        (["--shards=12", "--health-url=http://127.0.0.1:8080/h"], "not supported yet"),
        (["--shards=64", f"--election={'e' * 240}"], "too long for 64 shards"),
    ],
)
def test_bad_shard_flags_say_what_is_wrong_in_one_line(
    flags: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert command(["run", "--election=main", *flags], {"POD_NAME": "p"}) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1, err


def test_a_planned_move_is_told_as_info_and_a_lost_term_as_a_warning() -> None:
    """Every scale moves shards: a warning each time would be noise nobody should act on."""
    out = io.StringIO()
    report = LogReport(
        Logger("info", stream=out), "leader-main-shard-0", "ns", Timing(), lambda: None
    )
    view: Any = None  # LogReport reads only the event
    report.on_event(Event("stepped_down", f"{MOVE}pod-b"), view)
    report.on_event(Event("stepped_down", "transfer to pod-b"), view)
    report.on_event(Event("stepped_down", "renew deadline passed without a successful renew"), view)
    levels = [json.loads(line)["level"] for line in out.getvalue().splitlines()]
    assert levels == ["info", "info", "warning"]


class _FailsOneRelease:
    """One pod's view of the shared store: its first write of a shard's Lease that names
    another holder than itself (a move's release) fails as a broken link does."""

    def __init__(self, store: FakeLeases, identity: str) -> None:
        self.store, self.identity, self.failed = store, identity, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    async def replace(self, body: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        holder = body.get("spec", {}).get("holderIdentity")
        if not self.failed and "-shard-" in body["metadata"]["name"] and holder != self.identity:
            self.failed += 1
            raise ApiUnavailable("cannot connect: connection reset", verb="update leases")
        return await self.store.replace(body, timeout)


def test_a_move_whose_release_fails_leaves_the_shard_free_to_come_back(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = had_sidecars(FakeLeases())
        view = _FailsOneRelease(store, "a")
        a = await Pod("a", view, tmp_path, shards=2).start()  # type: ignore[arg-type]
        await until(lambda: len(a.owns()) == 2, 60, "a owns both shards")
        b = await Pod("b", store, tmp_path, shards=2).start()
        # One shard moves to b; a's release of it fails: b takes it after the lease.
        await until(lambda: len(a.owns()) == 1 and len(b.owns()) == 1, 30, "one shard each")
        assert view.failed == 1
        # b stops: its release names a, whose assignment gives it both shards again.
        assert await b.stop() == 0
        await until(lambda: len(a.owns()) == 2, 30, "a owns both shards again")
        assert await a.stop() == 0

    run(scenario)


class _HeartbeatLandsAsItLeaves:
    """The store, with a member Lease written once more just before its first delete: the
    heartbeat in flight as the pod leaves, which makes that delete a 409."""

    def __init__(self, store: FakeLeases) -> None:
        self.store, self.raced = store, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    async def delete(self, name: str, resource_version: str, **kw: Any) -> None:
        if not self.raced and "-member-" in name:
            self.raced += 1
            current = self.store.objects[name]
            await self.store.patch(name, {"metadata": {"annotations": {"beat": "late"}}})
            assert current["metadata"]["resourceVersion"] == resource_version
        await self.store.delete(name, resource_version, **kw)


def test_a_leaving_pod_deletes_its_member_lease_even_past_a_late_heartbeat(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        store = had_sidecars(FakeLeases())
        view = _HeartbeatLandsAsItLeaves(store)
        a = await Pod("a", view, tmp_path, shards=2).start()  # type: ignore[arg-type]
        await until(lambda: len(a.owns()) == 2, 60, "a owns both shards")
        assert await a.stop() == 0
        assert view.raced == 1
        assert not [n for n in store.objects if "-member-" in n], list(store.objects)

    run(scenario)


def test_metrics_tell_each_shard_once_and_the_process_once(tmp_path: Path) -> None:
    """Contract §4: a sharded election's /metrics has each family once, a sample per shard
    labelled by its Lease, and the process's start time once; it parses as Prometheus text."""
    from prometheus_client.parser import text_string_to_metric_families

    async def scenario() -> None:
        store = had_sidecars(FakeLeases())
        pods = [await Pod(name, store, tmp_path, shards=3).start() for name in ("a", "b")]
        await until(lambda: _balanced(pods, 3), 60, "3 shards over 2 pods")
        text = pods[0].sidecar.published.metrics()
        families = {f.name: f for f in text_string_to_metric_families(text)}
        assert text.count("# TYPE leader_election_master_status ") == 1
        leading = {
            s.labels["name"]: s.value for s in families["leader_election_master_status"].samples
        }
        assert set(leading) == {shard_lease(LEASE, i) for i in range(3)}
        assert sum(leading.values()) == len(pods[0].owns())
        assert len(families["process_start_time_seconds"].samples) == 1
        for p in pods:
            assert await p.stop() == 0

    run(scenario)


class _Seat:
    """One shard's elector as the board sees it: its Lease's holder, whether it leads."""

    def __init__(self, holder: str | None, leading: bool, handed_by: str | None = None) -> None:
        notes = {"leader-election.grelmicro.io/handoff-from": handed_by} if handed_by else {}
        self.record = LeaseRecord.from_object(
            {"metadata": {"name": "l", "annotations": notes}, "spec": {"holderIdentity": holder}}
        )
        self.leading, self.stood = leading, list[bool]()
        self.moved_to: list[str | None] = []

    def view(self) -> Any:
        state = types.SimpleNamespace(is_leader=self.leading)
        return types.SimpleNamespace(state=state, record=self.record, unchanged_for=0.0)

    def stand(self, candidate: bool, why: str) -> None:
        self.stood.append(candidate)

    async def hand_over(self, successor: str | None, reason: str, drained: Any) -> bool:
        self.moved_to.append(successor)
        return True


def test_a_pod_a_hand_off_names_takes_the_shard_up_even_past_its_share() -> None:
    """Shards in a rollout of real pods (stop 49): a stopping pod handed a shard to a pod
    that was over its share by the time it landed. The pod named stood aside; the shard
    went to whichever pod scored highest, each pod that joined meanwhile in turn, and one
    started after the claim waits a lease duration before taking a release: 9.4 s
    unowned. A pod that a hand-off names takes the shard up, then moves it by the usual
    planned hand-off, which any pod started before it claimed sees live."""

    async def scenario() -> None:
        alive = frozenset({"a", "b", "c"})
        members = types.SimpleNamespace(identity="a", alive=alive, known=asyncio.Event())
        members.known.set()
        board = ShardBoard(3, members, Logger("error"))  # type: ignore[arg-type]
        targets = assign(3, alive, {0: "a", 1: "b", 2: "a"})
        given = next(s for s in (0, 2) if targets[s] != "a")  # over its share: one goes
        kept = 2 - given
        seats = {kept: _Seat("a", True), 1: _Seat("b", False), given: _Seat("a", False, "d")}
        for shard, seat in seats.items():
            board.seat(shard, Drain(Logger("error")))
            board.join(shard, seat)  # type: ignore[arg-type]
        board.rebalance()
        assert seats[given].stood[-1] is True, (targets, seats[given].stood)
        assert seats[1].stood[-1] is False
        seats[given].leading = True  # its claim landed: now it moves it as the others compute
        board.rebalance()
        await asyncio.sleep(0)
        assert seats[given].moved_to == [targets[given]]

    asyncio.run(scenario())
