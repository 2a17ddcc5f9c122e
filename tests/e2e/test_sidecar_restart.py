"""A sidecar that stops while its app runs on: no successor's app acts before this app stops.

Issue 27 item 2, on the real node. The app here does what the contract allows
(§4): it re-reads ``state.json`` every 2 s and acts ("act <time>", every
0.1 s) while the last file it read said it leads and its ``valid_until`` is
ahead. The leader pod's sidecar container alone is signalled through
containerd (as a liveness kill or an in-place update would stop it); its app
keeps running on what it read. The successor's app must not act before the
first app's last act.
"""

from __future__ import annotations

import sys
import time

import pytest

from sidecar.injector.patch import CONTAINER_NAME
from tests.cluster.node import Node
from tests.e2e.conftest import Cluster, wait_for
from tests.e2e.test_election import deploy, leaders, pods

# POSIX sh, sed, awk, GNU date: in the app image (a Debian stand-in on our node).
ACTING_APP = r"""
trap 'exit 0' TERM
next=0; until=0
while true; do
  now=$(date +%s.%N)
  if awk "BEGIN{exit !($now >= $next)}"; then
    f=$(cat "$LEADER_ELECTION_STATE_FILE" 2>/dev/null)
    lead=$(printf '%s\n' "$f" | sed -n 's/.*"is_leader": *\(true\|false\).*/\1/p')
    vu=$(printf '%s\n' "$f" | sed -n 's/.*"valid_until": *"\([^"]*\)".*/\1/p')
    if [ "$lead" = true ] && [ -n "$vu" ]; then until=$(date -d "$vu" +%s.%N); else until=0; fi
    next=$(awk "BEGIN{printf \"%.3f\", $now + 2}")
  fi
  if awk "BEGIN{exit !($now < $until)}"; then echo "act $now"; fi
  sleep 0.1
done
"""


def _acts(e2e: Cluster, namespace: str, pod: str) -> list[float]:
    out = e2e.kubectl("logs", "-n", namespace, pod, "-c", "app").stdout
    return [float(line.split()[1]) for line in out.splitlines() if line.startswith("act ")]


@pytest.mark.parametrize("signal", ["SIGTERM", "SIGKILL"])
def test_a_sidecar_stopped_under_its_running_app_never_lets_a_successor_act_beside_it(
    e2e: Cluster, workload_namespace: str, local_node: Node, signal: str
) -> None:
    ns = workload_namespace
    deploy(e2e, ns, "acting", ACTING_APP, replicas=2)
    leader = wait_for(lambda: leaders(e2e, ns, "acting"), 60, "a leader")[0]
    (other,) = [
        p["metadata"]["name"] for p in pods(e2e, ns, "acting") if p["metadata"]["name"] != leader
    ]
    wait_for(lambda: _acts(e2e, ns, leader), 30, "the leader's app to act")
    time.sleep(3)  # mid-term: the app holds a valid_until seconds ahead
    pod = e2e.json("get", "pod", "-n", ns, leader)
    sidecar = next(s for s in pod["status"]["initContainerStatuses"] if s["name"] == CONTAINER_NAME)
    stopped = time.time()
    local_node.kill_container(sidecar["containerID"], signal)
    try:
        wait_for(lambda: [t for t in _acts(e2e, ns, other) if t > stopped], 60, "the successor")
    except AssertionError:
        for name, flags in ((leader, ("--previous",)), (leader, ()), (other, ())):
            out = e2e.kubectl("logs", "-n", ns, name, "-c", CONTAINER_NAME, *flags, check=False)
            print(f"----- {name} {flags}\n{out.stdout[-4000:]}{out.stderr[-500:]}", file=sys.stderr)
        for name in (leader, other):
            out = e2e.kubectl("logs", "-n", ns, name, "-c", "app", "--tail=30", check=False)
            print(f"----- app {name}\n{out.stdout}{out.stderr}", file=sys.stderr)
            out = e2e.kubectl(
                "exec",
                "-n",
                ns,
                name,
                "-c",
                "app",
                "--",
                "sh",
                "-c",
                "cat $LEADER_ELECTION_STATE_FILE; date +%s.%N",
                check=False,
            )
            print(f"----- file {name}\n{out.stdout}{out.stderr}", file=sys.stderr)
        raise
    time.sleep(2)
    first_app = [t for t in _acts(e2e, ns, leader) if t > stopped]
    successor = [t for t in _acts(e2e, ns, other) if t > stopped]
    assert first_app, "the first app stopped acting at once: the test proves nothing"
    gap = min(successor) - max(first_app)
    print(
        f"\n[e2e] {signal} to the leader's sidecar alone: its app acted {max(first_app) - stopped:.2f}s"
        f" more, the successor's app from {min(successor) - stopped:.2f}s (gap {gap:.2f}s)",
        file=sys.stderr,
    )
    assert gap > 0, f"the two apps acted at once for {-gap:.2f}s"
