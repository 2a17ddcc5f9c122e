"""Installed, upgraded and uninstalled from a registry, exactly as README says, while the
user's Deployment keeps exactly one leader: README's "Install on your cluster", "Upgrade"
and "Uninstall" blocks run word for word.

A registry on this machine stands in for ghcr.io (``registry`` and ``published``
in conftest.py): the node's containerd mirrors ghcr.io to it, ``make release``'s
image and chart are pushed to it by ``hack/publish.sh`` (the release workflow's
own push), and the user's commands run in a private mount namespace whose
``/etc/hosts`` sends ghcr.io there (``tests/e2e/readme.py``). Then, on a namespace
``my-app`` (Pod Security ``restricted``) with a Deployment ``my-app`` of three
replicas whose app reads the sidecar's state file, README's block runs
unchanged, and the test checks that the chart came from the registry, that the
node pulled the sidecar's image from it by the release's digest, and that
``my-app`` has exactly one leader (``kubectl get leases`` and the state files).
Then, with the apps recording what their sidecars tell them (``observer``):
``helm upgrade`` of a value, README's "Upgrade" to the next release (made from
this tree with the version bumped, ``published_next``) with its ``kubectl
rollout restart``, and README's "Uninstall"; through all of it no app may be
told it leads while another's pod surely does, no stretch without a leader may
exceed 2 s, and after the uninstall the leader keeps renewing (the Lease RBAC
is kept). Everything is deleted at the end, the registry stopped.

It needs a cluster where no release of the chart is installed yet (README's
commands use the defaults): ``fresh_cluster`` runs it before the other tests.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import readme
from tests.e2e.conftest import Cluster, Published, wait_for
from tests.e2e.observer import Views, handovers, leaderless, overlaps
from tests.e2e.test_election import deployment as election_deployment

pytestmark = [pytest.mark.timeout(3600), pytest.mark.fresh_cluster]

INSTALL, UPGRADE, UNINSTALL = "## Install on your cluster", "## Upgrade", "## Uninstall"
#: The most a workload may go without a leader through an upgrade or the uninstall.
MAX_LEADERLESS = 2.0
NAMESPACE = "my-app"
APP = "my-app"
SYSTEM = "grelmicro-system"


def deployment() -> dict[str, Any]:
    """The user's Deployment before README: three replicas, no annotation yet. Its app asks
    its sidecar who leads five times a second and logs each answer (observer.py); before the
    sidecar is injected there is no $LEADER_ELECTION_URL, and it logs 000."""
    mine = election_deployment(APP, replicas=3)
    mine["metadata"]["namespace"] = NAMESPACE
    del mine["spec"]["template"]["metadata"]["annotations"]
    return mine


def _cleanup(e2e: Cluster, shell: readme.UserShell) -> None:
    shell.run(f"helm uninstall grelmicro-sidecar --namespace {SYSTEM} --wait || true")
    # Kept on uninstall by design (README); this cluster is shared with the tests after this one.
    e2e.kubectl("delete", "clusterrole", "grelmicro-sidecar-leases", "--ignore-not-found")
    for namespace in (NAMESPACE, SYSTEM):
        e2e.kubectl(
            "delete", "namespace", namespace, "--ignore-not-found", "--wait=true", timeout=180
        )


def _state(e2e: Cluster, pod: str) -> dict[str, Any]:
    out = e2e.kubectl(
        "exec", "-n", NAMESPACE, pod, "-c", "app", "--", "sh", "-c",
        'cat "$LEADER_ELECTION_STATE_FILE"',
    ).stdout  # fmt: skip
    state: dict[str, Any] = json.loads(out)
    return state


def _one_leader(e2e: Cluster, pods: list[str]) -> str | None:
    """The leader, when exactly one pod's state file says it leads and all name it holder."""
    states = {}
    for pod in pods:
        try:
            states[pod] = _state(e2e, pod)
        except (AssertionError, json.JSONDecodeError):
            return None
    leaders = [pod for pod, s in states.items() if s["is_leader"]]
    if len(leaders) != 1 or any(s["holder"] != leaders[0] for s in states.values()):
        return None
    return leaders[0]


def test_readme_install_upgrade_and_uninstall_keep_my_app_with_one_leader(
    e2e: Cluster, published: Published, published_next: Published, tmp_path: Path
) -> None:
    try:
        install = readme.block(INSTALL)
    except readme.MissingBlock as err:
        pytest.fail(f"{err}: the block README's users copy is what this test runs")
    installed = e2e.helm("list", "--all-namespaces", "-o", "json").stdout
    assert json.loads(installed) == [], (
        f"README installs the chart with its defaults on a cluster that has none yet: {installed}"
    )
    registry, version, digest = published.registry, published.version, published.digest
    shell = readme.UserShell(e2e.kubeconfig, tmp_path / "home", registry)
    before = len(registry.requests())

    try:
        # The user's namespace and Deployment, running before the sidecar is added.
        e2e.kubectl("create", "namespace", NAMESPACE)
        e2e.kubectl(
            "label", "namespace", NAMESPACE, "pod-security.kubernetes.io/enforce=restricted"
        )
        e2e.kubectl("apply", "-f", "-", input=json.dumps(deployment()))
        e2e.kubectl(
            "rollout", "status", "-n", NAMESPACE, f"deployment/{APP}", "--timeout=180s",
            timeout=200,
        )  # fmt: skip

        ran = shell.run(install, timeout=900)
        assert ran.ok, f"README's install block failed:\n{ran.output}"

        # The chart came from the registry: helm fetched its manifest and its layer there.
        pulled = [r for r in registry.requests()[before:] if r.method == "GET" and r.status < 400]
        chart_paths = [r.path for r in pulled if r.path.startswith("/v2/grelinfo/charts/")]
        assert f"/v2/grelinfo/charts/grelmicro-sidecar/manifests/{version}" in chart_paths, pulled
        assert any("/blobs/sha256:" in p for p in chart_paths), chart_paths
        [listed] = json.loads(
            shell.run(f"helm list --namespace {SYSTEM} -o json", trace=False).output
        )
        assert (listed["chart"], listed["status"]) == (f"grelmicro-sidecar-{version}", "deployed")
        values = shell.run(f"helm get values grelmicro-sidecar -n {SYSTEM} -o json", trace=False)
        assert json.loads(values.output) in (None, {})  # README sets no value: the defaults

        # The node pulled the sidecar's image from the registry, by the release's digest.
        image_paths = [
            r.path for r in pulled if r.path.startswith("/v2/grelinfo/grelmicro-sidecar/")
        ]
        assert f"/v2/grelinfo/grelmicro-sidecar/manifests/{digest}" in image_paths, pulled
        assert any("/blobs/sha256:" in p for p in image_paths), image_paths
        by_node = [r for r in pulled if r.path.startswith("/v2/grelinfo/grelmicro-sidecar/")]
        assert all(r.query == "ns=ghcr.io" for r in by_node), by_node  # containerd's mirror
        expected = f"ghcr.io/grelinfo/grelmicro-sidecar@{digest}"
        pods = e2e.json("get", "pods", "-n", NAMESPACE, "-l", f"app.kubernetes.io/name={APP}")
        running = [p for p in pods["items"] if not p["metadata"].get("deletionTimestamp")]
        assert len(running) == 3, [p["metadata"]["name"] for p in running]
        for pod in running:
            [sidecar_status] = [
                s
                for s in pod["status"].get("initContainerStatuses", [])
                if s["name"] == "grelmicro-sidecar"
            ]
            assert sidecar_status["imageID"] == expected, sidecar_status
        injector = e2e.json("get", "pods", "-n", SYSTEM)["items"]
        assert injector and all(
            s["imageID"] == expected for p in injector for s in p["status"]["containerStatuses"]
        ), [s["imageID"] for p in injector for s in p["status"]["containerStatuses"]]

        # Exactly one leader in my-app: the Lease's holder, and the one state file that says so.
        names = [p["metadata"]["name"] for p in running]
        leader = wait_for(lambda: _one_leader(e2e, names), 60, "one leader in the state files")
        leases = e2e.json("get", "leases", "-n", NAMESPACE)["items"]
        holders = [lease["spec"].get("holderIdentity") for lease in leases]
        assert holders.count(leader) == 1 and [h for h in holders if h in names] == [leader], leases
        assert (
            f"leader-{APP}" in ran.output and leader in ran.output
        )  # `kubectl get leases` showed it

        with Views(e2e, NAMESPACE, APP).recording() as views:
            wait_for(lambda: len(views.logs) == 3, 60, "the three apps' logs")
            since = wait_for(
                lambda: (
                    any(a.leads for ans in views.answers().values() for a in ans) and time.time()
                ),
                30,
                "an app told it leads",
            )
            _upgrade_then_uninstall(e2e, shell, published_next, views)
        _check_views(views.since(since))
    finally:
        _cleanup(e2e, shell)


def _upgrade_then_uninstall(
    e2e: Cluster, shell: readme.UserShell, nxt: Published, views: Views
) -> None:
    # helm upgrade of a value: the injector rolls out; running pods are not touched.
    value = shell.run(
        "helm upgrade grelmicro-sidecar oci://ghcr.io/grelinfo/charts/grelmicro-sidecar "
        f"--version {_installed_version(shell)} --namespace {SYSTEM} --wait "
        "--set injector.logLevel=debug"
    )
    assert value.ok, value.output
    # README's Upgrade, to the next release: the injector, then my-app, rolled out.
    upgrade = readme.block(UPGRADE)
    assert "<new>" in upgrade, upgrade
    ran = shell.run(upgrade.replace("<new>", nxt.version), timeout=900)
    assert ran.ok, f"README's upgrade block failed:\n{ran.output}"
    expected = f"ghcr.io/grelinfo/grelmicro-sidecar@{nxt.digest}"
    pods = e2e.json("get", "pods", "-n", NAMESPACE, "-l", f"app.kubernetes.io/name={APP}")
    running = [p for p in pods["items"] if not p["metadata"].get("deletionTimestamp")]
    images = [
        s["imageID"]
        for p in running
        for s in p["status"].get("initContainerStatuses", [])
        if s["name"] == "grelmicro-sidecar"
    ]
    assert images == [expected] * 3, images  # every pod runs the new sidecar
    names = [p["metadata"]["name"] for p in running]
    wait_for(lambda: _one_leader(e2e, names), 60, "one leader after the upgrade")

    # README's Uninstall: the injector goes, the Lease grants stay, the leader keeps leading.
    ran = shell.run(readme.block(UNINSTALL), timeout=300)
    assert ran.ok, f"README's uninstall block failed:\n{ran.output}"
    assert e2e.json("get", "mutatingwebhookconfigurations")["items"] == []
    can = e2e.kubectl(
        "auth", "can-i", "update", "leases.coordination.k8s.io", "-n", NAMESPACE,
        "--as", f"system:serviceaccount:{NAMESPACE}:default", check=False,
    )  # fmt: skip
    assert can.stdout.strip() == "yes", can.stdout + can.stderr
    lease = e2e.json("get", "lease", "-n", NAMESPACE, f"leader-{APP}")["spec"]
    time.sleep(25)  # more than a lease (15 s): a leader without its grants would have lost it
    later = e2e.json("get", "lease", "-n", NAMESPACE, f"leader-{APP}")["spec"]
    assert later["holderIdentity"] == lease["holderIdentity"], (lease, later)
    assert later["renewTime"] != lease["renewTime"], "the leader stopped renewing"
    assert _one_leader(e2e, names) == later["holderIdentity"]


def _installed_version(shell: readme.UserShell) -> str:
    [listed] = json.loads(shell.run(f"helm list -n {SYSTEM} -o json", trace=False).output)
    return str(listed["app_version"])


def _check_views(views: dict[str, list[Any]]) -> None:
    assert not overlaps(views), overlaps(views)[:3]
    gaps = leaderless(views)
    moves = handovers(views)
    print(
        f"\nupgrade and uninstall: {len(moves)} handover(s) "
        f"{[round(g, 3) for _, _, g in moves]} s; longest without a leader "
        f"{gaps[0][1] - gaps[0][0] if gaps else 0.0:.3f} s"
    )
    assert moves, "the rollout restart moved no leadership"
    assert not gaps or gaps[0][1] - gaps[0][0] <= MAX_LEADERLESS, gaps[:3]
