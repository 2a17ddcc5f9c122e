"""Old and new sidecars in one election under chaos (issue 27, item 7).

An injector upgrade changes the sidecar of new pods only: a pod keeps the
sidecar it was injected with until it restarts, so for days an election has
candidates of both versions. Here two of four candidates run the sidecar of
the first release (``versions.OLD_COMMIT``, 9ad030b, extracted from the git
history into the cache) and two today's, under every cheap fault (the
control-plane restarts are the long run's: ``python -m tests.chaos --old 2``).

Judged: never two claims at once (file/file, probe/file), and today's fencing
tokens always rise, across the old sidecars' terms too. The old sidecars'
tokens are ``leaseTransitions`` (issue 12 made them resourceVersions), so they
are not comparable with today's: the run counts how often the token went back
across versions, and docs/contract.md §2 says what that means for fencing.

``GRELMICRO_CHAOS_MIXED_SECONDS`` (default 50) and ``GRELMICRO_CHAOS_SEED`` tune it.
"""

from __future__ import annotations

import os
import signal
import time
from functools import partial
from pathlib import Path

import pytest

from tests.cluster import ControlPlane
from tests.sidecar.proc import SidecarProcess, leaders, wait_for

from .harness import CHEAP_KINDS, ChaosRun, Timings
from .versions import OLD_COMMIT, old_command, unavailable_reason

SECONDS = float(os.environ.get("GRELMICRO_CHAOS_MIXED_SECONDS", "50"))
SEED = int(os.environ["GRELMICRO_CHAOS_SEED"]) if os.environ.get("GRELMICRO_CHAOS_SEED") else None


@pytest.fixture(scope="module")
def old_sidecar() -> list[str]:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    return old_command()


def test_old_and_new_sidecars_never_lead_at_once_under_faults(
    cluster: ControlPlane, namespace: str, tmp_path: Path, old_sidecar: list[str]
) -> None:
    timings = Timings(lease=3.0, renew=2.0, retry=0.5)
    run = ChaosRun(
        cluster,
        namespace,
        tmp_path,
        sidecars=4,
        timings=timings,
        seed=SEED,
        old=2,
        old_command=old_sidecar,
        leader_bias=0.8,
    )
    try:
        run.start()
        run.run(SECONDS, every_kind_first=False, menu=CHEAP_KINDS, handovers=4)
        outcome = run.finish()
    except BaseException:
        run.abort()
        raise
    text = (
        f"seed {run.seed}; old sidecars {sorted(run.old)} at {OLD_COMMIT[:7]}\n{outcome.summary()}"
    )
    print(text)
    (tmp_path / "chaos-report.txt").write_text(text)
    report = outcome.report
    assert not report.violations, text
    assert not outcome.crashes, text
    assert outcome.extra["leader_after_healing"] is not None, text
    # Both versions led, and leadership moved between them.
    leaders = {c.who for c in report.claims}
    assert leaders & run.old and leaders - run.old, text
    assert report.handovers >= 4, text


@pytest.mark.xfail(
    strict=True,
    reason="the first release's fencing token is leaseTransitions, today's a resourceVersion "
    "(issue 12): across versions the token goes back; docs/contract.md §2, versions side by side",
)
def test_the_fencing_token_rises_across_a_handover_between_versions(
    cluster: ControlPlane, namespace: str, tmp_path: Path, old_sidecar: list[str]
) -> None:
    """old leads, hands over to new (graceful), new hands back to old: three terms, in order."""
    old = SidecarProcess(tmp_path, cluster.kubeconfig, namespace, "old-a")
    old.args[:1] = old_sidecar
    new = SidecarProcess(tmp_path, cluster.kubeconfig, namespace, "new-b")
    procs = [old, new]
    tokens: list[tuple[str, int]] = []
    try:
        old.start()
        wait_for(lambda: leaders(procs) == ["old-a"], 30, what="the old sidecar leads")
        new.start()
        time.sleep(1.0)
        for leaving, taking in ((old, new), (new, old)):
            state = leaving.state()
            assert state is not None
            tokens.append((leaving.identity, int(state["fencing_token"])))
            leaving.signal(signal.SIGTERM)
            assert leaving.wait(20) == 0
            wait_for(partial(_leads_alone, procs, taking.identity), 30, what=taking.identity)
            leaving.start()  # back as a follower, as the kubelet restarts it
            time.sleep(1.0)
        state = old.state()
        assert state is not None
        tokens.append((old.identity, int(state["fencing_token"])))
    finally:
        for proc in procs:
            proc.stop()
    print(f"\nfencing tokens in order of the terms: {tokens}")
    values = [t for _, t in tokens]
    assert values == sorted(values) and len(set(values)) == 3, tokens


def _leads_alone(procs: list[SidecarProcess], identity: str) -> bool:
    return leaders(procs) == [identity]
