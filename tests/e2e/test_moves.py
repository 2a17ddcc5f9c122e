"""Leadership moved while every pod runs on, in real pods (issue 39): a transfer, the app's health.

The app asks its sidecar ``GET $LEADER_ELECTION_URL`` every 0.1 s and logs it
(``observer``: the overlap check and the handover gaps come from there), ends a
drain at once by ``POST $LEADER_ELECTION_DRAINED_URL``, and, with health
followed, touches ``$LEADER_ELECTION_HEALTH_FILE`` while it is healthy: while
no ``sick`` file is in its ack directory (the test makes one with ``kubectl
exec``), and with ``FLAP`` set, only in every other half-second (which ones, by its pod's name).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.e2e.conftest import Cluster, wait_for
from tests.e2e.observer import ASK_AND_LOG, Views, handovers, overlaps
from tests.e2e.test_election import deploy, leaders, pods

# POSIX sh, curl, sed, date: in our Debian stand-in.
MOVING_APP = r"""
trap 'exit 0' TERM
acked=none
phase=$(( $(printf '%s' "$HOSTNAME" | cksum | cut -d' ' -f1) % 2 ))
while true; do
  if [ -n "$LEADER_ELECTION_HEALTH_FILE" ] && [ ! -e "${LEADER_ELECTION_ACK_FILE%/*}/sick" ]; then
    if [ -z "$FLAP" ] || [ $(( ($(date +%s%N) / 500000000 + phase) % 2 )) -eq 0 ]; then
      touch "$LEADER_ELECTION_HEALTH_FILE"
    fi
  fi
@ASK_AND_LOG@  drain=$(printf '%s\n' "$out" | sed -n 's/^ *"token": *\([0-9][0-9]*\).*/\1/p' | head -n 1)
  if [ -n "$drain" ] && [ "$drain" != "$acked" ]; then
    curl -s -m 1 -X POST "$LEADER_ELECTION_DRAINED_URL?token=$drain" >/dev/null
    acked=$drain
  fi
  sleep 0.1
done
""".replace("@ASK_AND_LOG@", ASK_AND_LOG.lstrip("\n"))
P = "leader-election.grelmicro.io/"


def _workload(e2e: Cluster, ns: str, name: str, notes: dict[str, str], flap: bool = False) -> None:
    env = {"FLAP": "1"} if flap else {}
    deploy(e2e, ns, name, MOVING_APP, env, replicas=3, annotations=notes)


def _plugin(e2e: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    """``kubectl grelmicro ARGS`` as a user types it: kubectl finds the plugin on PATH."""
    bin_dir = Path(sys.executable).parent  # where pip put kubectl-grelmicro
    env = {**os.environ, "KUBECONFIG": str(e2e.kubeconfig)}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    kubectl = e2e.command()[0]
    return subprocess.run(
        [kubectl, "grelmicro", *args], capture_output=True, text=True, timeout=90, env=env
    )


def test_kubectl_grelmicro_transfer_moves_leadership_to_the_chosen_pod(
    e2e: Cluster, workload_namespace: str
) -> None:
    ns = workload_namespace
    _workload(e2e, ns, "moving", {})
    with Views(e2e, ns, "moving").recording() as views:
        leader = wait_for(lambda: leaders(e2e, ns, "moving"), 60, "a leader")[0]
        names = [p["metadata"]["name"] for p in pods(e2e, ns, "moving")]
        target = next(n for n in names if n != leader)
        wait_for(lambda: all(views.answers().get(n) for n in names), 60, "every app's view")
        time.sleep(3)
        asked = time.time()
        done = _plugin(e2e, "transfer", "moving", f"--to={target}", "-n", ns)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"moving: {leader} -> {target} in "), done.stdout
        wait_for(lambda: leaders(e2e, ns, "moving") == [target], 30, "the target leads")
        time.sleep(2)
    seen = views.since(asked - 1)
    assert overlaps(views.answers()) == []
    moves = [(a, b, gap) for a, b, gap in handovers(seen) if (a, b) == (leader, target)]
    print(
        f"\n[e2e] transfer {leader} -> {target}: {done.stdout.strip()}; apps' gap "
        f"{moves[0][2]:.3f}s",
        file=sys.stderr,
    )
    assert moves and moves[0][2] < 1.0, moves


def test_a_leader_whose_app_turns_unhealthy_hands_over_to_a_healthy_pod(
    e2e: Cluster, workload_namespace: str
) -> None:
    ns = workload_namespace
    notes = {
        P + "health-file": "true",
        P + "health-file-age": "1s",  # the app touches it every 0.2 s or so while healthy
        P + "health-period": "1s",
        P + "health-failures": "2",
        P + "health-hold": "5s",
    }
    _workload(e2e, ns, "healthy", notes)
    with Views(e2e, ns, "healthy").recording() as views:
        leader = wait_for(lambda: leaders(e2e, ns, "healthy"), 60, "a leader")[0]
        time.sleep(8)  # past the hold, every pod healthy and listed
        sick = time.time()
        e2e.kubectl(
            "exec",
            "-n",
            ns,
            leader,
            "-c",
            "app",
            "--",
            "touch",
            "/var/run/leader-election-ack/sick",
        )
        wait_for(lambda: leaders(e2e, ns, "healthy") not in ([], [leader]), 30, "another pod leads")
        time.sleep(5)
        assert leader not in leaders(e2e, ns, "healthy"), "the unhealthy pod leads again"
    seen = views.since(sick)
    assert overlaps(views.answers()) == []
    firsts = [a.sent for pod, answers in seen.items() if pod != leader for a in answers if a.leads]
    took = min(firsts) - sick
    print(
        f"\n[e2e] health: a healthy pod's app led {took:.2f}s after the leader's app turned "
        "sick (its file stale after 1s, checks every 1s, 2 failures)",
        file=sys.stderr,
    )
    # period x failures + 1 s, + the file's age (1 s) and kubectl exec (1 s)
    assert took < 2 * 1.0 + 1.0 + 1.0 + 1.0, took


def test_flapping_health_moves_leadership_a_bounded_number_of_times(
    e2e: Cluster, workload_namespace: str
) -> None:
    """Every app's health toggles every 500 ms for two minutes: leadership moves at most
    once per hold (10 s) plus the first, and two apps are never told they lead at once."""
    ns = workload_namespace
    notes = {
        P + "health-file": "true",
        P + "health-file-age": "400ms",
        P + "health-period": "500ms",
        P + "health-failures": "1",
        P + "health-successes": "1",
        P + "health-hold": "10s",
    }
    _workload(e2e, ns, "flapping", notes, flap=True)
    with Views(e2e, ns, "flapping").recording() as views:
        wait_for(lambda: leaders(e2e, ns, "flapping"), 60, "a leader")
        start = time.time()
        time.sleep(120)
    seen = views.since(start)
    moves = handovers(seen)
    print(f"\n[e2e] flapping for 120s: {len(moves)} moves", file=sys.stderr)
    assert overlaps(views.answers()) == []
    assert len(moves) <= 120 / 10 + 1, moves
