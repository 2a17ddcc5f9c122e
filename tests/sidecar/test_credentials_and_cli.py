"""Token rotation, the status command, and signals during a stuck shutdown."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests import accounts
from tests.cluster import ControlPlane
from tests.sidecar.proc import BIN, SidecarProcess, wait_for

Spawn = Callable[..., SidecarProcess]


def test_rotated_token_file_is_picked_up(
    spawn: Spawn, cluster: ControlPlane, api: Any, namespace: str, tmp_path: Path
) -> None:
    """Like the kubelet's projected token: the file is swapped, then the old token dies."""
    accounts.service_account(api, namespace)
    accounts.grant_leases(api, namespace)
    old = accounts.token(api, namespace, bound_to_secret="bound-old")
    new = accounts.token(api, namespace, bound_to_secret="bound-new")
    token_file = tmp_path / "token"
    token_file.write_text(old)
    kubeconfig = accounts.kubeconfig(
        tmp_path / "kc", cluster.server, cluster.ca_file, {"tokenFile": str(token_file)}
    )
    a = spawn("pod-a", kubeconfig=kubeconfig)
    wait_for(a.leads, 20, what="leadership with the first token")

    staged = tmp_path / "token.new"
    staged.write_text(new)
    staged.replace(token_file)
    client.CoreV1Api(api).delete_namespaced_secret("bound-old", namespace)
    wait_for(
        lambda: accounts.lease_list_status(cluster, namespace, old) == 401,
        10,
        what="the old token to be rejected",
    )

    renewals = len([r for r in a.logs() if r.get("msg") == "leading"])
    time.sleep(4)  # four renew intervals at 1s
    assert a.leads(), a.raw_log()[-2000:]
    assert not any("401" in str(r.get("msg")) for r in a.logs())
    assert (
        len([r for r in a.logs() if r.get("msg") == "leading"]) == renewals
    )  # no step-down/re-acquire


def test_status_command_lists_managed_leases(
    spawn: Spawn, cluster: ControlPlane, namespace: str
) -> None:
    a = spawn("pod-a")
    wait_for(a.leads, 15)
    run = lambda *extra: subprocess.run(  # noqa: E731
        [
            str(BIN),
            "status",
            f"--namespace={namespace}",
            f"--kubeconfig={cluster.kubeconfig}",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    out = run()
    assert out.returncode == 0, out.stderr
    header, row = out.stdout.splitlines()[:2]
    assert header.split() == [
        "ELECTION",
        "LEASE",
        "HOLDER",
        "TRANSITIONS",
        "RENEWED",
        "EXPIRES",
        "IN",
    ]
    assert row.split()[:4] == ["main", "leader-main", "pod-a", "0"]
    rows = json.loads(run("-o", "json").stdout)
    assert rows[0]["holder"] == "pod-a" and rows[0]["lease"] == "leader-main"
    assert rows[0]["lease_transitions"] == 0
    empty = subprocess.run(
        [str(BIN), "status", "-n", "kube-public", f"--kubeconfig={cluster.kubeconfig}"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert "No managed leases in namespace kube-public." in empty.stdout


@pytest.fixture
def blackhole() -> Any:
    """A TCP port that accepts connections (kernel backlog) and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    yield sock.getsockname()[1]
    sock.close()


def test_second_signal_exits_at_once(
    spawn: Spawn, cluster: ControlPlane, tmp_path: Path, blackhole: int
) -> None:
    kubeconfig = accounts.kubeconfig(
        tmp_path / "kc", f"https://127.0.0.1:{blackhole}", cluster.ca_file, {"token": "t"}
    )
    a = spawn("pod-a", kubeconfig=kubeconfig)
    wait_for(lambda: a.http("/healthz")[0] == 200, 10, what="the sidecar to serve")
    a.signal(signal.SIGTERM)
    wait_for(lambda: "published not-leader" in a.messages(), 5, what="shutdown to begin")
    time.sleep(0.5)
    assert a.alive, "the release is stuck on the silent API server, so the process is still up"
    a.signal(signal.SIGTERM)
    sent = time.monotonic()
    code = a.wait(5)
    assert time.monotonic() - sent < 2.0
    assert code == 1
    state = a.state()
    assert state is not None and state["is_leader"] is False
