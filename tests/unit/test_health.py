"""Health-driven candidacy (contract §2, health): leadership follows the app's health.

The real elector and observers as ``run`` wires them, on the fake store and
looptime's virtual clock (``test_driver``), with each app's health set by hand
(the check ``--health-url`` would run is replaced by a flag). What the apps see
is read from the real state files every 10 ms, so two leaders would be seen.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from sidecar.commands.cli import command
from sidecar.core.healthpolicy import HealthPolicy
from tests.unit.fake_leases import FakeLeases
from tests.unit.test_driver import Candidate, had_sidecars, run, until
from tests.unit.test_transfer import Overlaps

POLICY = HealthPolicy(period=2.0, failures=3, successes=2, timeout=1.0, hold=30.0)
#: From the first failed check to the step-down: ``failures`` checks, one period apart.
DETECT = POLICY.failures * POLICY.period


class App:
    """An app whose health the test sets; its acknowledgement of a drain, if it gives one."""

    def __init__(self, healthy: bool = True, answers_in: float = 0.0) -> None:
        self.healthy, self.answers_in = healthy, answers_in

    async def check(self) -> bool:
        await asyncio.sleep(self.answers_in)
        return self.healthy


async def _candidate(
    name: str, store: FakeLeases, tmp: Path, app: App, policy: HealthPolicy = POLICY
) -> Candidate:
    return await Candidate(name, store, tmp, health=(policy, app.check)).start()


def test_an_unhealthy_leader_hands_over_to_a_healthy_follower(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = had_sidecars(FakeLeases())
        apps = {n: App() for n in "abc"}
        a = await _candidate("a", store, tmp_path, apps["a"])
        await until(a.leads, 20, "a leads once its app is healthy")
        b = await _candidate("b", store, tmp_path, apps["b"])
        await asyncio.sleep(5)
        apps["c"].healthy = False
        c = await _candidate("c", store, tmp_path, apps["c"])
        await asyncio.sleep(POLICY.hold)  # a has led long enough for a health move
        overlaps = Overlaps([a, b, c])
        assert a.sidecar.published.actions is not None
        status, line = a.sidecar.published.actions["/transfer"]({"to": "c"})  # c: unhealthy
        assert status == 409 and "c is not a candidate" in line and "app healthy?" in line, line
        token = a.state()["fencing_token"]
        loop = asyncio.get_running_loop()
        failed = loop.time()
        apps["a"].healthy = False
        await until(lambda: a.state().get("drain") is not None, DETECT + 1, "the drain told")
        assert a.state()["drain"]["reason"] == "app unhealthy"
        assert a.sidecar.published.actions["/drained"]({"token": str(token)})[0] == 200
        await until(b.leads, 2, "b (healthy) leads")
        assert loop.time() - failed < DETECT + POLICY.period + 1
        await asyncio.sleep(60)
        assert b.leads() and not a.leads() and not c.leads()  # c's app is unhealthy
        assert overlaps.seen == 0
        told = a.sidecar.metrics.render()
        assert 'grelmicro_sidecar_app_healthy{name="leader-main"} 0' in told
        assert (
            'grelmicro_sidecar_handovers_total{name="leader-main",reason="app_unhealthy"} 1' in told
        )
        assert 'grelmicro_sidecar_handovers_total{name="leader-main",reason="transfer"} 0' in told
        for x in (a, b, c):
            assert await x.stop() == 0

    run(scenario)


def test_an_unhealthy_candidate_never_claims_and_is_never_named(tmp_path: Path) -> None:
    """The leader stops with only an unhealthy follower left: nobody leads, until that app is
    healthy again; then it leads."""

    async def scenario() -> None:
        store = had_sidecars(FakeLeases())
        sick = App(healthy=False)
        a = await _candidate("a", store, tmp_path, App())
        await until(a.leads, 20, "a leads")
        b = await _candidate("b", store, tmp_path, sick)
        await asyncio.sleep(10)
        assert await a.stop() == 0
        await asyncio.sleep(60)
        assert not b.leads(), "a candidate whose app is unhealthy led"
        assert store.holder("leader-main") in (None, "")  # not named either
        sick.healthy = True
        await until(b.leads, 2 * POLICY.period + 20, "b leads once healthy")
        assert await b.stop() == 0

    run(scenario)


def test_with_nobody_else_healthy_keep_leads_on_and_nobody_steps_down(tmp_path: Path) -> None:
    async def scenario() -> None:
        for when_none, leads_on in (("keep", True), ("nobody", False)):
            store = had_sidecars(FakeLeases())
            app = App()
            policy = HealthPolicy(
                period=2.0, failures=3, successes=2, hold=0.0, when_none=when_none
            )
            a = await _candidate("a", store, tmp_path / when_none, app, policy)
            await until(a.leads, 20, "a leads")
            app.healthy = False
            await asyncio.sleep(DETECT + 15)  # detected, and past any valid_until
            assert a.leads() is leads_on, when_none
            assert await a.stop() == 0

    run(scenario)


def test_flapping_health_moves_leadership_at_most_once_per_hold(tmp_path: Path) -> None:
    """Every app's health toggles every 500 ms for two minutes, out of step: leadership moves
    at most once per hold (plus the first), and two never lead at once."""

    async def scenario() -> None:
        store = had_sidecars(FakeLeases())
        apps = [App() for _ in range(3)]
        policy = HealthPolicy(period=0.5, failures=1, successes=1, hold=30.0)
        cs = [await _candidate(f"p{i}", store, tmp_path, app, policy) for i, app in enumerate(apps)]
        await until(lambda: any(c.leads() for c in cs), 20, "someone leads")
        overlaps = Overlaps(cs)
        start_tokens = {c.state()["fencing_token"] for c in cs if c.leads()}

        async def flap() -> None:
            for step in range(240):
                for i, app in enumerate(apps):
                    app.healthy = (step + i) % 2 == 0
                await asyncio.sleep(0.5)

        terms: set[int] = set()

        async def count() -> None:
            while True:
                terms.update(c.state()["fencing_token"] for c in cs if c.leads())
                await asyncio.sleep(0.05)

        counter = asyncio.create_task(count())
        await flap()
        counter.cancel()
        moves = len(terms - start_tokens)
        assert moves <= 120 / policy.hold + 1, moves
        assert overlaps.seen == 0
        for c in cs:
            assert await c.stop() == 0

    run(scenario)


def test_a_candidate_claims_only_once_its_app_has_passed_its_checks(tmp_path: Path) -> None:
    """Until the first verdict the app counts as unhealthy, as a container is unready until
    its first probe passes: a brand-new election, which its first candidate would lead at
    once, is led only after ``successes`` checks have passed, and never by a failing app."""

    async def scenario() -> None:
        store = had_sidecars(FakeLeases())
        sick = App(healthy=False, answers_in=0.9)  # slow: the election may act before it
        a = await _candidate("a", store, tmp_path, sick)
        await asyncio.sleep(DETECT + 10)
        assert not a.leads() and store.holder("leader-main") is None
        assert await a.stop() == 0
        b = await _candidate("b", store, tmp_path, App())
        took = await until(b.leads, 20, "b leads")
        assert (POLICY.successes - 1) * POLICY.period <= took < POLICY.successes * POLICY.period + 1
        assert await b.stop() == 0

    run(scenario)


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--health-url=http://10.0.0.1/healthz"], "expected an http:// URL on loopback"),
        (["--health-url=http://127.0.0.1/h", "--health-file=/tmp/h"], "keep one"),
        (["--health-period=1s"], "--health-period without --health-url or --health-file"),
        (["--health-url=http://127.0.0.1/h", "--health-failures=0"], "from 1 to 100"),
        # A digit to str.isdigit, not to int(): refused, not a traceback (found by the fuzz).
        (["--health-url=http://127.0.0.1/h", "--health-failures=¹"], "from 1 to 100"),
        (["--health-url=http://127.0.0.1/h", "--when-none-healthy=any"], "one of keep, nobody"),
    ],
)
def test_bad_health_flags_say_what_is_wrong_in_one_line(
    flags: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert command(["run", "--election=main", *flags], {}) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1, err
