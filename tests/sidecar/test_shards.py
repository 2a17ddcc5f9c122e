"""Shards against the real API server, in real processes (contract §2, shards; issue 40).

Each sidecar runs ``run --shards=12``; each app reads its state file every
10 ms, acts on a shard only while its entry says ``is_leader`` with
``valid_until`` ahead, and acknowledges each shard's drain on the sidecar's
port as soon as it is told (``POST /drained?shard=<i>&token=<t>``), as a
well-behaved app does. The test watches what the apps act on: a shard acted
on by two apps at one instant is counted, and so is how long each moved
shard went without an owner in the apps' view.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sidecar.core.shards import shard_lease
from tests.chaos.moves import post
from tests.cluster import ControlPlane
from tests.e2e.readme import block
from tests.sidecar.proc import BIN, SidecarProcess, _parse, wait_for

SHARDS = 12
ARGS = (
    "--lease-duration=3s",
    "--renew-deadline=2s",
    "--retry-period=500ms",
    f"--shards={SHARDS}",
)

Spawn = Callable[..., SidecarProcess]
README = Path(__file__).resolve().parents[2] / "README.md"
HEADING = "### Shards: one owner per shard"


def _readme(fence: str, marker: str) -> str:
    """README's ``fence`` block under the shards heading that contains ``marker``, as written."""
    section = README.read_text().split(HEADING, 1)[1].split("\n## ", 1)[0]
    [code] = [b for b in re.findall(rf"```{fence}\n(.*?)```", section, re.S) if marker in b]
    return code


def readme_snippets_say(proc: SidecarProcess, tmp: Path) -> dict[str, list[int]]:
    """What README's sh, Python and Go snippets say this pod owns, each run as a user would."""
    env = {
        **os.environ,
        "LEADER_ELECTION_STATE_FILE": str(proc.state_dir / "state.json"),
        "LEADER_ELECTION_SHARDS": str(SHARDS),
        "LEADER_ELECTION_SHARDS_URL": f"http://127.0.0.1:{proc.port}/shards",
    }
    loop = block(HEADING, README).split("done\n", 1)[0] + "done\n"
    sh = subprocess.run(
        ["bash", "-c", f"do_shard_work() {{ echo \"$1\"; }}\n{loop}"],
        env=env, capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    scope: dict[str, Any] = {}
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        exec(compile(_readme("python", "def owned_shards"), str(README), "exec"), scope)
        python = scope["owned_shards"]()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    said = {"sh": [int(w) for w in sh.stdout.split()], "python": python}
    go = shutil.which("go")
    if go is not None:
        main = tmp / "snippet" / "main.go"
        main.parent.mkdir(exist_ok=True)
        (main.parent / "go.mod").write_text("module snippet\n\ngo 1.21\n")
        main.write_text(
            'package main\n\nimport (\n\t"encoding/json"\n\t"fmt"\n\t"os"\n\t"time"\n)\n\n'
            + _readme("go", "func ownedShards")
            + "\nfunc main() {\n\towned, err := ownedShards()\n\tif err != nil {\n"
            "\t\tpanic(err)\n\t}\n\tout, _ := json.Marshal(owned)\n\tfmt.Println(string(out))\n}\n"
        )
        ran = subprocess.run(
            [go, "run", "."], cwd=main.parent, env={**env, "GOFLAGS": "-mod=mod"},
            capture_output=True, text=True, timeout=120, check=True,
        )  # fmt: skip
        said["go"] = json.loads(ran.stdout) or []
    return said


def owned(proc: SidecarProcess) -> set[int]:
    """What the app acts on: the shards whose entry says it leads, ``valid_until`` ahead."""
    state = proc.state() or {}
    now = time.time()
    return {
        s["shard"]
        for s in state.get("shards") or []
        if s["is_leader"] and s["valid_until"] and _parse(s["valid_until"]) > now
    }


class Apps:
    """Every 10 ms: what each app acts on, every drain acknowledged, every overlap counted,
    and each shard's stretches with no owner."""

    def __init__(self, procs: list[SidecarProcess]) -> None:
        self.procs, self.twice, self.acked = procs, 0, 0
        self.owner: dict[int, str | None] = {}
        self.ownerless_since: dict[int, tuple[float, str]] = {}
        #: Each return of a shard to an owner: (shard, last owner, new owner, seconds unowned).
        self.moves: list[tuple[int, str, str, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            seen: dict[int, list[str]] = {}
            for proc in list(self.procs):
                for shard in owned(proc):
                    seen.setdefault(shard, []).append(proc.identity)
                self._acknowledge(proc)
            self.twice += sum(1 for who in seen.values() if len(who) > 1)
            for shard in range(SHARDS):
                who = seen.get(shard, [None])[0]
                last = self.owner.get(shard)
                if who is None and last is not None:
                    self.ownerless_since[shard] = (now, last)
                if who is not None and shard in self.ownerless_since:
                    since, before = self.ownerless_since.pop(shard)
                    self.moves.append((shard, before, who, now - since))
                elif who is not None and last is not None and who != last:
                    self.moves.append((shard, last, who, 0.0))  # seen in one step
                self.owner[shard] = who
            time.sleep(0.01)

    def _acknowledge(self, proc: SidecarProcess) -> None:
        for entry in (proc.state() or {}).get("shards") or []:
            drain = entry.get("drain")
            if drain is not None and proc.alive:
                status, _ = post(
                    proc.port, f"/drained?shard={entry['shard']}&token={drain['token']}"
                )
                self.acked += status == 200

    def counts(self) -> Counter[str]:
        return Counter(who for who in self.owner.values() if who is not None)

    def balanced(self, among: int) -> bool:
        counts = self.counts()
        return (
            len(counts) == among
            and sum(counts.values()) == SHARDS
            and max(counts.values()) - min(counts.values()) <= 1
        )

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def _holders(api: Any, namespace: str) -> dict[int, str]:
    """Each shard's holder as ``kubectl get leases`` shows it."""
    from kubernetes import client

    coordination = client.CoordinationV1Api(api)
    out = {}
    for shard in range(SHARDS):
        lease = coordination.read_namespaced_lease(shard_lease("leader-main", shard), namespace)
        out[shard] = lease.spec.holder_identity
    return out


def _status(cluster: ControlPlane, namespace: str, *flags: str) -> str:
    """What ``grelmicro-sidecar status`` prints for the namespace, as a user runs it."""
    args = [str(BIN), "status", "-n", namespace, f"--kubeconfig={cluster.kubeconfig}", *flags]
    done = subprocess.run(args, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_twelve_shards_balance_over_three_pods_and_a_fourth_takes_three(
    spawn: Spawn, api: Any, namespace: str, cluster: ControlPlane
) -> None:
    pods = [spawn(f"pod-{n}", extra=ARGS) for n in "abc"]
    apps = Apps(pods)
    try:
        wait_for(lambda: apps.balanced(3), 60, what="12 shards balanced over 3 pods")
        assert sorted(apps.counts().values()) == [4, 4, 4]
        time.sleep(3)  # a lease duration: nothing moves at steady state
        before = dict(apps.owner)
        assert _holders(api, namespace) == before
        rows = json.loads(_status(cluster, namespace, "-o", "json"))  # no member heartbeats
        assert [(r["election"], r["shard"], r["holder"]) for r in rows] == [
            ("main", s, before[s]) for s in range(SHARDS)
        ]
        table = [line.split() for line in _status(cluster, namespace).splitlines()]
        assert table[0][:3] == ["ELECTION", "SHARD", "LEASE"], table[0]
        assert table[1][:4] == ["main", "0", shard_lease("leader-main", 0), before[0]]
        status, body = pods[0].http("/shards/0")
        assert status == (200 if before[0] == "pod-a" else 503), body
        assert pods[0].http(f"/shards/{SHARDS}")[0] == 404

        moves_before = len(apps.moves)
        d = spawn("pod-d", extra=ARGS)
        apps.procs = [*pods, d]
        wait_for(lambda: apps.balanced(4), 60, what="12 shards balanced over 4 pods")
        time.sleep(1)
        after = dict(apps.owner)
        moved = sorted(s for s in range(SHARDS) if before[s] != after[s])
        assert len(moved) == 3 and all(after[s] == "pod-d" for s in moved), (
            sorted(before.items()),
            sorted(after.items()),
        )
        moves = apps.moves[moves_before:]
        print(f"\n3 -> 4 pods, moves (shard, from, to, s unowned): {moves}; acked {apps.acked}")
        assert len(moves) == 3 and max(m[3] for m in moves) < 1.5, moves  # no valid_until wait
        assert apps.twice == 0
    finally:
        apps.stop()


def test_a_stopping_pod_hands_its_shards_off_and_a_killed_ones_are_taken_after_the_lease(
    spawn: Spawn, tmp_path: Path
) -> None:
    pods = [spawn(f"pod-{n}", extra=ARGS) for n in "abc"]
    apps = Apps(pods)
    try:
        wait_for(lambda: apps.balanced(3), 60, what="12 shards balanced over 3 pods")
        said = readme_snippets_say(pods[0], tmp_path)
        assert all(sorted(v) == sorted(owned(pods[0])) for v in said.values()), said
        assert len(said) == 3 or shutil.which("go") is None
        stopping = pods[2]
        had = {s for s, who in apps.owner.items() if who == stopping.identity}
        moves_before = len(apps.moves)
        stopping.signal(signal.SIGTERM)
        assert stopping.wait(15) == 0
        wait_for(lambda: apps.balanced(2), 15, what="the stopped pod's shards taken")
        moves = apps.moves[moves_before:]
        print(f"\nSIGTERM, moves (shard, from, to, s unowned): {moves}")
        assert len(moves) == len(had) and max(m[3] for m in moves) < 1.5, moves
        assert not stopping.state()["is_leader"]  # type: ignore[index]

        killed = pods[1]
        killed.signal(signal.SIGKILL)
        killed.wait(5)
        apps.procs = [pods[0], stopping, killed]  # the dead apps' files stay as they were
        killed_at = time.monotonic()
        wait_for(lambda: len(owned(pods[0])) == SHARDS, 20, what="pod-a owns every shard")
        print(f"SIGKILL: every shard with pod-a in {time.monotonic() - killed_at:.1f} s")
        assert apps.twice == 0
    finally:
        apps.stop()


def test_one_shard_is_the_plain_election(
    spawn: Spawn, api: Any, namespace: str, cluster: ControlPlane
) -> None:
    from kubernetes import client

    a = spawn("pod-a", extra=(*ARGS[:3], "--shards=1"))
    wait_for(a.leads, 30, what="pod-a to lead")
    state = a.state()
    assert state is not None and "shards" not in state and state["holder"] == "pod-a"
    names = {
        lease.metadata.name
        for lease in client.CoordinationV1Api(api).list_namespaced_lease(namespace).items
    }
    assert "leader-main" in names and not any("-shard-" in n or "-member-" in n for n in names)
    assert a.http("/shards/0")[0] == 404
    assert _status(cluster, namespace).split()[:3] == ["ELECTION", "LEASE", "HOLDER"]
