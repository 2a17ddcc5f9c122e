"""``status`` and ``cleanup`` with the kubeconfigs platform teams really have (issue 13 item 1).

Against the real API server, what fakes cannot prove: an exec credential
plugin (what EKS, GKE and AKS write) run through the official client, and
``--as``/``--as-group`` impersonation sent as headers by the project's own
call path. The loader itself (precedence, a merged ``KUBECONFIG`` list,
``--context``, the refusals, no official client) is tested in-process:
tests/unit/test_kubeconfig_*.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests import accounts
from tests.cluster import ControlPlane, binaries
from tests.sidecar.proc import BIN

MANAGED = {"app.kubernetes.io/managed-by": "grelmicro"}
pytestmark = pytest.mark.timeout(180)  # a watch that never prints must not hang the run


@pytest.fixture
def one_lease(api: Any, namespace: str) -> str:
    client.CoordinationV1Api(api).create_namespaced_lease(
        namespace,
        client.V1Lease(
            metadata=client.V1ObjectMeta(name="leader-web", labels=MANAGED),
            spec=client.V1LeaseSpec(holder_identity="web-0", lease_duration_seconds=15),
        ),
    )
    return "leader-web"


@pytest.fixture
def reader_token(api: Any, namespace: str) -> str:
    accounts.service_account(api, namespace)
    accounts.grant_leases(api, namespace)
    return accounts.token(api, namespace)


def _status(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GRELMICRO_", "KUBE"))}
    return subprocess.run(
        [str(BIN), "status", "-o", "json", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**base, **(env or {})},
    )


def _holders(out: subprocess.CompletedProcess[str]) -> list[str]:
    assert out.returncode == 0, out.stderr
    return [row["holder"] for row in json.loads(out.stdout)]


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_exec_credential_plugin(
    cluster: ControlPlane,
    namespace: str,
    one_lease: str,
    reader_token: str,
    tmp_path: Path,
    version: str,
) -> None:
    user = accounts.exec_plugin_user(tmp_path, reader_token, version)
    config = accounts.kubeconfig(tmp_path / "kc", cluster.server, cluster.ca_file, user, namespace)
    assert _holders(_status(f"--kubeconfig={config}")) == ["web-0"]


def test_as_impersonates_instead_of_acting_as_the_real_user(
    api: Any, cluster: ControlPlane, namespace: str, one_lease: str, reader_token: str
) -> None:
    admin = f"--kubeconfig={cluster.kubeconfig}"
    assert _holders(_status(admin, "-n", namespace)) == ["web-0"]
    elector = f"system:serviceaccount:{namespace}:elector"
    assert _holders(_status(admin, "-n", namespace, f"--as={elector}")) == ["web-0"]
    accounts.service_account(api, namespace, "nobody")
    nobody = f"--as=system:serviceaccount:{namespace}:nobody"
    denied = _status(admin, "-n", namespace, nobody)
    assert denied.returncode == 1, denied.stdout
    assert "forbidden: cannot list leases" in denied.stderr, denied.stderr
    # Every --as-group is sent (a header each): the second one grants the list.
    groups = ["--as-group=nobody-group", "--as-group=system:masters"]
    assert _holders(_status(admin, "-n", namespace, nobody, *groups)) == ["web-0"]
    one = _status(admin, "-n", namespace, nobody, "--as-group=nobody-group")
    assert one.returncode == 1 and "forbidden: cannot list leases" in one.stderr, one.stderr


def _plugin_env(cluster: ControlPlane) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GRELMICRO_", "KUBE"))}
    return {**base, "KUBECONFIG": str(cluster.kubeconfig), "PATH": f"{BIN.parent}:{base['PATH']}"}


def _kubectl(cluster: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    kubectl = cluster.bins.get("kubectl") or binaries.ensure("kubernetes")["kubectl"]
    return subprocess.run(
        [str(kubectl), *args], capture_output=True, text=True, timeout=60, env=_plugin_env(cluster)
    )


def test_kubectl_plugin_lists_like_kubectl_get(
    api: Any, cluster: ControlPlane, namespace: str, one_lease: str
) -> None:
    core = client.CoreV1Api(api)
    other = f"{namespace}-b"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=other)))
    try:
        client.CoordinationV1Api(api).create_namespaced_lease(
            other,
            client.V1Lease(
                metadata=client.V1ObjectMeta(name="leader-jobs", labels=MANAGED),
                spec=client.V1LeaseSpec(holder_identity="jobs-1", lease_duration_seconds=15),
            ),
        )
        table = _kubectl(cluster, "grelmicro", "status", "-n", namespace)
        assert table.returncode == 0, table.stderr
        assert table.stdout.split("\n")[0].split() == [
            "ELECTION", "LEASE", "HOLDER", "TRANSITIONS", "RENEWED", "EXPIRES", "IN",
        ]  # fmt: skip
        assert "web-0" in table.stdout and "jobs-1" not in table.stdout
        every = _kubectl(cluster, "grelmicro", "status", "-A")
        lines = [line.split() for line in every.stdout.splitlines()]
        assert lines[0][0] == "NAMESPACE"
        assert [namespace, "web", "leader-web", "web-0"] in [line[:4] for line in lines]
        assert [other, "jobs", "leader-jobs", "jobs-1"] in [line[:4] for line in lines]
        wide = _kubectl(cluster, "grelmicro", "status", "-n", namespace, "-o", "wide")
        assert wide.stdout.split("\n")[0].split()[-2:] == ["ACQUIRED", "DURATION"]
        as_yaml = yaml.safe_load(
            _kubectl(cluster, "grelmicro", "status", "-A", "-o", "yaml").stdout
        )
        assert {(r["namespace"], r["holder"]) for r in as_yaml} >= {
            (namespace, "web-0"),
            (other, "jobs-1"),
        }
    finally:
        core.delete_namespace(other)


def _as_from_a_terminal() -> None:
    """SIGINT as a terminal's Ctrl-C finds it: default action, not blocked. The test
    runner may have it ignored or blocked (run in the background), and a child inherits
    both; the full suite twice saw the plugin outlive this Ctrl-C, never the test alone."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _signal_masks(pid: int) -> str:
    """The signal masks of ``pid`` from /proc (SigBlk, SigIgn, SigCgt), for a failure message."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError as err:
        return f"no /proc/{pid}/status: {err}"
    return ", ".join(line for line in lines if line.startswith(("SigBlk", "SigIgn", "SigCgt")))


def test_status_watch_prints_each_change_and_ends_on_ctrl_c(
    api: Any, cluster: ControlPlane, namespace: str, one_lease: str
) -> None:
    kubectl = cluster.bins.get("kubectl") or binaries.ensure("kubernetes")["kubectl"]
    watch = subprocess.Popen(
        [str(kubectl), "grelmicro", "status", "-n", namespace, "--watch"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_plugin_env(cluster),
        preexec_fn=_as_from_a_terminal,
    )
    try:
        assert watch.stdout is not None
        header = watch.stdout.readline()
        assert header.split()[:3] == ["ELECTION", "LEASE", "HOLDER"]
        assert "web-0" in watch.stdout.readline()
        coord = client.CoordinationV1Api(api)
        lease = coord.read_namespaced_lease("leader-web", namespace)
        lease.spec.holder_identity, lease.spec.lease_transitions = "web-1", 1
        coord.replace_namespaced_lease("leader-web", namespace, lease)
        changed = watch.stdout.readline()  # blocks until the next poll prints it
        assert changed.split()[:4] == ["web", "leader-web", "web-1", "1"], changed
        # Later lines stay in the first table's columns, as kubectl get -w prints them.
        assert changed.index("web-1") == header.index("HOLDER"), (header, changed)
        watch.send_signal(signal.SIGINT)
        try:
            code = watch.wait(10)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"no exit 10 s after SIGINT; {_signal_masks(watch.pid)}") from None
        assert code == 0
        assert "Traceback" not in (watch.stderr.read() if watch.stderr else "")
    finally:
        if watch.poll() is None:
            watch.kill()
