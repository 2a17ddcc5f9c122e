"""``python -m tests.chaos --minutes 30``: the long chaos run, by hand.

Starts its own control plane in a temporary directory, runs N sidecars under
random faults (every kind, the slow cluster restarts included) for the given
time, then prints the checker's report and exits 1 if anything was violated.
The report is also written to ``--report`` (default ``chaos-report.txt`` in
the work directory, which is kept with ``--keep``).

``--lock`` runs ``lock``'s chaos (``lock_run``) instead, for the given time:
three lock processes whose commands are process trees, faults on the one whose
command runs; exit 1 on an overlap, a leftover process or a traceback.
``--with-lock`` runs that beside the election, in a namespace of its own, so
the control-plane faults (restarts, restores) hit the lock processes too.

``--old N``: N of the candidates run the sidecar of ``versions.OLD_COMMIT``
(the first release of the election) beside today's: the mixed-version run.
``--skip KIND...``: kinds never drawn (the mixed run skips the restores, which
the first release does not survive; contract §2).
``--candidates N`` (``--sidecars``): N candidates in the election, up to 32.
``--weight KIND=N`` draws a kind N times as often (``churn=16 sigterm=4``
moves leadership more often). ``--churn-seconds``, ``--churn-every`` and
``--churn-leader`` shape the ``churn`` fault (pods joining and leaving the
roster). Issue 38, item 5 (20 candidates, churn, 1,000 acquisitions):
``--candidates 20 --cheap --weight churn=16 --weight sigterm=4 --weight
sigkill=2 --weight partition=2 --leader-bias 0.9 --churn-leader 0.8
--churn-every 0.3 1 --gap 0.2 0.8 --minutes 45 --acquisitions 1000``.
Issue 39 (transfers, unhealthy apps, acknowledged drains then a frozen
sidecar, among the rest, 1,000 acquisitions): ``--candidates 8 --cheap
--lease 2 --renew 1.5 --retry 0.3 --weight churn=10 --weight transfer=8
--weight unhealthy=4 --weight ack-hang=2 --weight sigterm=3 --weight sigkill=2
--leader-bias 0.9 --churn-leader 0.8 --churn-every 0.3 1 --gap 0.2 0.6
--minutes 55 --acquisitions 1000``.
``--lazy-apps``: today's sidecars release only after their last
``valid_until`` and their apps are judged as re-reading the file now and then
(sidecar-only restarts, issue 27 item 2).
``--shards N``: every candidate runs ``run --shards=N`` and each shard is
judged as an election of its own (issue 40, item 4); ``--pods MIN MAX``
bounds the churn's roster, so the churn scales the election up and down
within it; ``--acquisitions`` then counts shard acquisitions. Issue 40
(N=12, P from 2 to 6, 1,000 shard acquisitions): ``--shards 12 --candidates
4 --pods 2 6 --cheap --lease 2 --renew 1.5 --retry 0.3 --weight churn=8
--weight sigterm=3 --weight sigkill=2 --weight partition=2 --churn-every
0.5 2 --gap 0.5 1.5 --minutes 30 --acquisitions 1000``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

from tests.cluster import ControlPlane

from .harness import CHEAP_KINDS, LONG_KINDS, SLOW_KINDS, ChaosRun, Timings
from .lock_run import LockReport


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos")
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument(
        "--sidecars",
        "--candidates",
        type=int,
        default=5,
        choices=range(2, 33),
        metavar="N",
        help="candidates in the election, 2-32 (default 5); the churn keeps about N",
    )
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--lease", type=float, default=3.0, help="lease duration, seconds (whole)")
    parser.add_argument("--renew", type=float, default=2.0, help="renew deadline, seconds")
    parser.add_argument("--retry", type=float, default=0.5, help="retry period, seconds")
    parser.add_argument(
        "--cheap",
        action="store_true",
        help="after every kind once, draw only the kinds that take seconds (no kube-apiserver, "
        "etcd or restore): more acquisitions per hour",
    )
    parser.add_argument(
        "--leader-bias",
        type=float,
        default=None,
        help="probability that a process or network fault picks the current leader "
        "(default 0.6 / 0.5): more handovers per hour",
    )
    parser.add_argument(
        "--gap",
        type=float,
        nargs=2,
        default=(1.5, 4.0),
        metavar=("MIN", "MAX"),
        help="seconds between faults, drawn uniformly (default 1.5 4)",
    )
    parser.add_argument(
        "--acquisitions",
        type=int,
        default=0,
        help="stop before --minutes once the claims show this many acquisitions "
        "(after every kind was played once)",
    )
    parser.add_argument("--report", type=Path, default=None)
    parser.add_argument(
        "--keep", action="store_true", help="keep the work directory (logs, state files)"
    )
    parser.add_argument(
        "--lock", action="store_true", help="lock's chaos (commands as process trees) instead"
    )
    parser.add_argument(
        "--with-lock",
        action="store_true",
        help="lock's chaos beside the election, under the same control-plane faults",
    )
    parser.add_argument(
        "--old",
        type=int,
        default=0,
        help="candidates that run the sidecar of the first release (versions.OLD_COMMIT)",
    )
    parser.add_argument(
        "--lazy-apps",
        action="store_true",
        help="today's sidecars release after their last valid_until; apps re-read now and then",
    )
    parser.add_argument(
        "--cheap-weight",
        type=int,
        default=1,
        help="draw each kind that takes seconds N times as often as the slow ones "
        "(control-plane restarts and restores)",
    )
    parser.add_argument(
        "--weight",
        action="append",
        default=[],
        metavar="KIND=N",
        help="draw KIND N times as often as a kind of weight 1 (after --cheap-weight), e.g. "
        "churn=3 sigterm=2: more acquisitions per hour",
    )
    parser.add_argument(
        "--churn-seconds",
        type=float,
        nargs=2,
        default=(6.0, 12.0),
        metavar=("MIN", "MAX"),
        help="how long one churn fault lasts, drawn uniformly (default 6 12)",
    )
    parser.add_argument(
        "--churn-every",
        type=float,
        nargs=2,
        default=(0.5, 2.0),
        metavar=("MIN", "MAX"),
        help="seconds between two steps (a join, a leave, or both) of a churn (default 0.5 2)",
    )
    parser.add_argument(
        "--churn-leader",
        type=float,
        default=0.25,
        help="how often a churn departure is the leader's (default 0.25)",
    )
    parser.add_argument(
        "--skip",
        nargs="+",
        default=(),
        choices=LONG_KINDS,
        metavar="KIND",
        help="kinds never drawn (e.g. the restores, for a mix with the first release, which "
        "does not survive them: contract §2 'Versions side by side')",
    )
    parser.add_argument(
        "--shards",
        type=int,
        default=1,
        choices=range(1, 65),
        metavar="N",
        help="every candidate runs --shards=N, each shard judged on its own (default 1: plain)",
    )
    parser.add_argument(
        "--pods",
        type=int,
        nargs=2,
        default=None,
        metavar=("MIN", "MAX"),
        help="the fewest and the most candidates the churn keeps (default: --candidates ± 1)",
    )
    parser.add_argument(
        "--ack-drains",
        type=float,
        default=0.7,
        help="sharded: how often an app acknowledges a shard's drain at once (default 0.7)",
    )
    args = parser.parse_args(argv)
    if args.shards > 1 and (args.old or args.lazy_apps):
        parser.error("--shards takes neither --old (no shards there) nor --lazy-apps")
    if args.pods is not None and not (2 <= args.pods[0] <= args.sidecars <= args.pods[1]):
        parser.error("--pods MIN MAX: 2 <= MIN <= --candidates <= MAX")
    if args.lock:
        return lock_chaos(args.minutes, args.seed, args.report, args.keep)

    workdir = Path(tempfile.mkdtemp(prefix="grelmicro-chaos-"))
    plane = ControlPlane(workdir / "cluster")
    print(f"work directory {workdir}; starting the control plane...", flush=True)
    plane.start()
    namespace = "chaos"
    plane.kubectl("create", "namespace", namespace)
    timings = Timings(args.lease, args.renew, args.retry)
    old_command = None
    if args.old:
        from .versions import OLD_COMMIT
        from .versions import old_command as make_old_command

        old_command = make_old_command()
        print(f"{args.old} candidates run the sidecar of {OLD_COMMIT[:7]}", flush=True)
    run = ChaosRun(
        plane,
        namespace,
        workdir,
        sidecars=args.sidecars,
        timings=timings,
        seed=args.seed,
        log=lambda line: print(f"{time.strftime('%H:%M:%S')} {line}", flush=True),
        leader_bias=args.leader_bias,
        gap=(args.gap[0], args.gap[1]),
        old=args.old,
        old_command=old_command,
        lazy_apps=args.lazy_apps,
        churn_seconds=(args.churn_seconds[0], args.churn_seconds[1]),
        churn_leader=args.churn_leader,
        churn_every=(args.churn_every[0], args.churn_every[1]),
        shards=args.shards,
        population=(args.pods[0], args.pods[1]) if args.pods else None,
        ack_drains=args.ack_drains,
    )
    print(
        f"seed {run.seed}; {args.sidecars} sidecars; lease {args.lease:g}s / renew {args.renew:g}s / "
        f"retry {args.retry:g}s; {args.minutes:g} minutes"
        f"{f' or {args.acquisitions} acquisitions' if args.acquisitions else ''}"
        f"{'; cheap kinds' if args.cheap else ''}; "
        f"leader bias {args.leader_bias if args.leader_bias is not None else 'default'}; "
        f"gap {args.gap[0]:g}-{args.gap[1]:g}s; churn {args.churn_seconds[0]:g}-"
        f"{args.churn_seconds[1]:g}s, a step every {args.churn_every[0]:g}-"
        f"{args.churn_every[1]:g}s, leader {args.churn_leader:g}; "
        f"pods {run.population_range[0]}-{run.population_range[1]}"
        f"{f'; {args.shards} shards, drains acknowledged {args.ack_drains:g}' if args.shards > 1 else ''}"
        f"{'; weights ' + ' '.join(args.weight) if args.weight else ''}",
        flush=True,
    )
    if args.cheap:
        menu = CHEAP_KINDS
    else:
        menu = tuple(
            kind
            for kind in LONG_KINDS
            for _ in range(1 if kind in SLOW_KINDS else args.cheap_weight)
        )
    weights = _weights(args.weight, parser)
    menu = tuple(
        kind for kind in menu if kind not in args.skip for _ in range(weights.get(kind, 1))
    )
    kinds = tuple(kind for kind in LONG_KINDS if kind not in args.skip)
    if args.skip:
        print(f"never drawn: {' '.join(args.skip)}", flush=True)
    lock = LockBeside(plane, run.seed, workdir, args.minutes * 60) if args.with_lock else None
    try:
        run.start()
        if lock is not None:
            lock.start()
        run.run(
            args.minutes * 60,
            every_kind_first=True,
            menu=menu,
            kinds=kinds,
            enough=args.acquisitions,
        )
        if lock is not None:
            lock.finish()  # the election's run may have ended early
        outcome = run.finish()
        lock_report = lock.join() if lock is not None else None
    except BaseException:
        run.abort()
        if lock is not None:
            lock.join()
        plane.stop()
        raise
    plane.stop()
    bound = timings.lease + 4 * timings.retry + 3.0
    worst = outcome.report.max_recovery
    failed = bool(
        outcome.report.violations
        or outcome.crashes
        or outcome.log_problems
        or (worst is not None and worst.recovery > bound)
        or any(t.fd_growth > 3 or t.rss_growth_kb > 4096 for t in outcome.report.trends)
    )
    text = f"seed {run.seed}\n{outcome.summary()}\nrecovery bound {bound:g}s"
    if lock_report is not None:
        failed = failed or bool(
            lock_report.overlaps or lock_report.leftovers or lock_report.tracebacks
        )
        text += f"\nlock beside it: {lock_report.summary()}"
        text += "".join(f"\nlock overlap: {a} / {b}" for a, b in lock_report.overlaps)
        text += "".join(f"\n{t}" for t in lock_report.tracebacks)
    text += f"\nresult: {'FAIL' if failed else 'ok'}"
    print(text)
    report = args.report or workdir / "chaos-report.txt"
    report.write_text(text + "\n")
    print(f"report: {report}")
    if not args.keep and args.report is not None:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0


def _weights(given: list[str], parser: argparse.ArgumentParser) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in given:
        kind, _, n = item.partition("=")
        if kind not in LONG_KINDS or not n.isdigit():
            parser.error(
                f"--weight {item}: expected KIND=N with KIND one of {' '.join(LONG_KINDS)}"
            )
        out[kind] = int(n)
    return out


class LockBeside:
    """``LockChaos`` in a thread, in namespace ``chaos-lock``, for as long as the election's run."""

    def __init__(self, plane: ControlPlane, seed: int, workdir: Path, seconds: float):
        from .lock_run import LockChaos

        plane.kubectl("create", "namespace", "chaos-lock")
        lock_dir = workdir / "lock"
        lock_dir.mkdir()
        self.chaos = LockChaos(plane, "chaos-lock", lock_dir, seed + 1000)
        self.seconds = seconds
        self.report: LockReport | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="lock-chaos", daemon=True)

    def _run(self) -> None:
        try:
            self.report = self.chaos.run(self.seconds)
        except BaseException as err:  # reported by join()
            self.error = err

    def start(self) -> None:
        self.thread.start()

    def finish(self) -> None:
        """End the lock's faults now, with the election's run (``--acquisitions``)."""
        self.chaos.done.set()

    def join(self) -> LockReport:
        self.thread.join()
        if self.error is not None:
            raise self.error
        assert self.report is not None
        return self.report


def lock_chaos(minutes: float, seed: int | None, report: Path | None, keep: bool) -> int:
    import random

    from .lock_run import LockChaos

    workdir = Path(tempfile.mkdtemp(prefix="grelmicro-lock-chaos-"))
    plane = ControlPlane(workdir / "cluster")
    print(f"work directory {workdir}; starting the control plane...", flush=True)
    plane.start()
    try:
        plane.kubectl("create", "namespace", "chaos")
        seed = random.randrange(1 << 30) if seed is None else seed
        print(f"seed {seed}; lock chaos for {minutes:g} minutes", flush=True)
        outcome = LockChaos(plane, "chaos", workdir, seed).run(minutes * 60)
    finally:
        plane.stop()
    failed = bool(outcome.overlaps or outcome.leftovers or outcome.tracebacks)
    text = f"seed {seed}\n{outcome.summary()}"
    for a, b in outcome.overlaps:
        text += f"\noverlap: {a} / {b}"
    text += "".join(f"\n{t}" for t in outcome.tracebacks)
    text += f"\nresult: {'FAIL' if failed else 'ok'}"
    print(text)
    (report or workdir / "lock-chaos-report.txt").write_text(text + "\n")
    if not keep and report is not None:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
