"""Python reference candidates for the benchmarks: grelmicro and the official client.

Runs in the peer virtualenv (``bench/peers.py`` builds it), not in the
project's: ``python pypeer.py grelmicro|official --kubeconfig ... --namespace
... --identity ... --state-dir ...``; in a pod (``bench/podpeers.py``) without
``--kubeconfig``, as its ServiceAccount.

Each library is used through its public API with its default timings
(15 s / 10 s / 2 s) and reports leadership the way the sidecar does: a
``<state-dir>/state.json`` rewritten atomically on every change, written from
the library's own signal of leadership (grelmicro's ``wait_for_leader`` /
``wait_lose_leader``; the official client's ``onstarted_leading`` /
``onstopped_leading`` callbacks), so the harness reads all of them alike.

SIGTERM/SIGINT: publish "not leader" first, then shut the library down the way
its documentation says (grelmicro: cancel the task, which releases the lock;
the official client has no release, so the process just exits).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any


class StateFile:
    def __init__(self, directory: Path, identity: str, namespace: str, lease: str):
        self.directory = directory
        self.identity = identity
        self.namespace = namespace
        self.lease = lease
        self.lock = threading.Lock()
        directory.mkdir(parents=True, exist_ok=True)

    def write(self, is_leader: bool) -> None:
        now = dt.datetime.now(dt.UTC)
        state: dict[str, Any] = {
            "election": self.lease.removeprefix("leader-"),
            "namespace": self.namespace,
            "lease": self.lease,
            "identity": self.identity,
            "is_leader": is_leader,
            "holder": self.identity if is_leader else None,
            "valid_until": None,
            "updated_at": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        }
        with self.lock:
            tmp = self.directory / ".state.json.tmp"
            with open(tmp, "w") as f:
                json.dump(state, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.directory / "state.json")


def run_grelmicro(args: argparse.Namespace, state: StateFile) -> None:
    import anyio
    from grelmicro.sync.kubernetes import KubernetesSyncBackend
    from grelmicro.sync.leaderelection import LeaderElection

    async def main() -> None:
        backend = KubernetesSyncBackend(namespace=args.namespace, kubeconfig=args.kubeconfig)
        election = LeaderElection(args.election, backend=backend, worker=args.identity)

        async def report() -> None:
            while True:
                await election.wait_for_leader()
                state.write(True)
                await election.wait_lose_leader()
                state.write(False)

        async with backend, anyio.create_task_group() as tg:
            tg.start_soon(election)
            tg.start_soon(report)
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    state.write(False)
                    tg.cancel_scope.cancel()
                    break

    anyio.run(main)


def run_official(args: argparse.Namespace, state: StateFile) -> None:
    from kubernetes import config
    from kubernetes.leaderelection import electionconfig, leaderelection
    from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

    def on_signal(_sig: int, _frame: Any) -> None:
        state.write(False)
        os._exit(0)  # the client has no release: the Lease simply expires

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if args.kubeconfig:
        config.load_kube_config(config_file=args.kubeconfig)
    else:
        config.load_incluster_config()
    lock = LeaseLock(args.lease, args.namespace, args.identity)
    cfg = electionconfig.Config(
        lock,
        lease_duration=15,
        renew_deadline=10,
        retry_period=2,
        onstarted_leading=lambda: state.write(True),
        onstopped_leading=lambda: state.write(False),
    )
    while True:  # run() returns after losing the lease; stand again
        leaderelection.LeaderElection(cfg).run()


def main() -> int:
    parser = argparse.ArgumentParser(prog="pypeer")
    parser.add_argument("library", choices=("grelmicro", "official"))
    parser.add_argument(
        "--kubeconfig", help="without it, the pod's ServiceAccount (in-cluster configuration)"
    )
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--identity", required=True)
    parser.add_argument("--state-dir", required=True, type=Path)
    parser.add_argument("--election", default="main", help="the Lease is leader-<election>")
    args = parser.parse_args()
    args.lease = f"leader-{args.election}"
    state = StateFile(args.state_dir, args.identity, args.namespace, args.lease)
    state.write(False)
    if args.library == "grelmicro":
        run_grelmicro(args, state)
    else:
        run_official(args, state)
    return 0


if __name__ == "__main__":
    sys.exit(main())
