"""``make demo`` on real pods: the chart, the annotated examples and a handover, on this machine's node.

1. Start a node beside the control plane (``tests/cluster/node.py``: kubelet,
   containerd, CNI, CoreDNS; all on loopback and one bridge).
2. Build the image from the Dockerfile (cached) and load it into the node.
3. ``helm install`` the chart; the injector's two replicas come up.
4. ``kubectl apply -f manifests/rbac.yaml -f manifests/leader-label.yaml`` and
   ``-k manifests/examples`` in namespace ``demo``, as docs/application.md tells a user to.
5. Who leads, read from inside each ``worker`` pod's app container, and
   ``kubectl get leases``.
6. ``kubectl delete pod`` the leader: the sidecar releases the Lease on
   SIGTERM and a successor takes over; the time it took.
7. ``helm uninstall``, stop the node, leave nothing behind.

Ctrl-C at any moment stops everything it started.
"""

from __future__ import annotations

import signal
import sys
import tempfile
import time
from pathlib import Path

from sidecar.core.lease import HANDOFF_ANNOTATION
from tests.cluster import images
from tests.cluster.node import Node
from tests.demo import BOLD, GREEN, RESET, Interrupted, _interrupt, say, title
from tests.e2e.conftest import CHART, ROOT, Cluster, wait_for
from tests.e2e.test_election import pods, view_from_app
from tests.e2e.test_examples import apply_examples, labelled_leader

NAMESPACE = "demo"
RELEASE = "grelmicro-sidecar"


def show_leaders(cluster: Cluster) -> str | None:
    leader = None
    for pod in sorted(p["metadata"]["name"] for p in pods(cluster, NAMESPACE, "worker")):
        state, code = view_from_app(cluster, NAMESPACE, pod)
        mark = f"{GREEN}leader{RESET}" if code == "200" else "follower"
        token = f" fencing token {state.get('fencing_token')}" if code == "200" else ""
        say(
            f"   {pod:<32} GET $LEADER_ELECTION_URL -> {code}  state file: is_leader={state['is_leader']}  {mark}{token}"
        )
        if code == "200":
            leader = pod
    return leader


def run(node: Node) -> None:
    cluster = Cluster(node.kubeconfig)
    title("2. Build the image from the Dockerfile and load it into the node")
    t0 = time.monotonic()
    archives = images.product_images()
    node.load_images(archives)
    say(
        f"   {archives[0].name}: {images.image_size(archives[0]) / 1e6:.0f} MB, ready in {time.monotonic() - t0:.1f}s"
    )

    title("3. helm install the chart")
    t0 = time.monotonic()
    cluster.helm(
        "install", RELEASE, str(CHART), "-n", "grelmicro-system", "--create-namespace", "--wait"
    )
    say(cluster.kubectl("get", "pods", "-n", "grelmicro-system").stdout.rstrip())
    say(f"   injector ready in {time.monotonic() - t0:.1f}s")

    title("4. Apply the annotated examples in namespace demo")
    cluster.kubectl("create", "namespace", NAMESPACE)
    cluster.kubectl("apply", "-n", NAMESPACE, "-f", str(ROOT / "manifests" / "rbac.yaml"))
    apply_examples(cluster, NAMESPACE)
    # api's leader carries the leader label; every pod is Ready, the Service selects the label.
    leader_api, _ = wait_for(
        lambda: labelled_leader(cluster, NAMESPACE), 90, "the api leader labelled"
    )
    say(
        cluster.kubectl(
            "get", "pods", "-n", NAMESPACE, "-L", "leader-election.grelmicro.io/leader"
        ).stdout.rstrip()
    )
    say(
        f"   every api pod is Ready; {leader_api} carries leader-election.grelmicro.io/leader=true, "
        "so the Service api-leader routes to it alone"
    )

    title("5. Who leads? From inside each worker pod's app container")
    leader = wait_for(lambda: show_leaders(cluster), 60, "a leader", interval=1)
    say(f"\n{BOLD}$ kubectl get leases -n demo{RESET}")
    say(cluster.kubectl("get", "leases", "-n", NAMESPACE).stdout.rstrip())
    say(
        "   (one Lease per election, its HOLDER the leader; grelmicro-sidecar, with no holder,\n"
        "    is what the namespace's sidecars share: who may be handed the Lease, who sweeps)"
    )

    title(f"6. kubectl delete pod {leader}")
    deleted = time.time()
    cluster.kubectl("delete", "pod", "-n", NAMESPACE, leader, "--wait=false")

    def successor() -> str | None:
        """The successor's own claim (a hand-off names it first, contract §2)."""
        lease = cluster.json("get", "lease", "-n", NAMESPACE, "leader-worker")
        holder = lease["spec"].get("holderIdentity")
        handed = HANDOFF_ANNOTATION in (lease["metadata"].get("annotations") or {})
        return holder if holder and holder != leader and not handed else None

    new = wait_for(successor, 60, "a successor", interval=0.05)
    say(
        f"   {new} leads {time.time() - deleted:.2f}s after the delete (released on SIGTERM, no expiry wait)"
    )
    time.sleep(2)
    show_leaders(cluster)


def main() -> int:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)
    node = Node(Path(tempfile.mkdtemp(prefix="grelmicro-demo-node-")))
    code = 0
    try:
        title("1. Start a node beside the control plane")
        node.start()
        say(f"   Node Ready and CoreDNS answering in {node.timings['ready']:.1f}s")
        run(node)
    except (Interrupted, KeyboardInterrupt) as why:
        say(f"\n{BOLD}Interrupted ({why or 'SIGINT'}): stopping everything.{RESET}")
        code = 130
    except Exception as err:
        say(f"\ndemo failed: {err}")
        code = 1
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        title("7. Stop everything")
        left = node.stop()
        if left:
            say(f"   left behind: {left}")
            code = code or 1
        else:
            node.remove()
            say("   node stopped; nothing left on the machine")
    return code


if __name__ == "__main__":
    sys.exit(main())
