"""A planned transfer against the real API server, in real processes (contract §2, transfer).

``kubectl grelmicro transfer`` is run as a user would, as an account that may
only ``get`` and ``patch`` Leases (what docs/operations.md grants); the
loopback ``POST /transfer`` is asked as the leader's app would.
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests import accounts
from tests.cluster import ControlPlane
from tests.sidecar.proc import BIN, SOURCE, SidecarProcess, leaders, wait_for
from tests.sidecar.test_handoff import _names

Spawn = Callable[..., SidecarProcess]
#: The verbs docs/operations.md grants to whoever runs the command.
TRANSFER_VERBS = ["get", "patch"]


def _three(spawn: Spawn, api: Any, namespace: str) -> list[SidecarProcess]:
    """pod-a leads, pod-b and pod-c follow and are listed in the roster (a transfer's targets)."""
    a = spawn("pod-a")
    wait_for(a.leads, 30, what="pod-a to lead")
    others = [spawn(name) for name in ("pod-b", "pod-c")]
    wanted = ["pod-b", "pod-c"]
    wait_for(lambda: sorted(_names(api, namespace)) == wanted, 20, what="pod-b and pod-c listed")
    return [a, *others]


def _operator(api: Any, cluster: ControlPlane, namespace: str, tmp_path: Path) -> Path:
    accounts.service_account(api, namespace, "operator")
    accounts.grant(
        api, namespace, "operator", "transfer", "coordination.k8s.io", "leases", TRANSFER_VERBS
    )
    who = f"system:serviceaccount:{namespace}:operator"
    accounts.wait_until_allowed(api, namespace, who, TRANSFER_VERBS)
    return accounts.token_kubeconfig(tmp_path / "operator", api, cluster, namespace, "operator")


def _command(*args: str, kubeconfig: Path, namespace: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(SOURCE)}
    argv = [str(BIN), "transfer", *args, f"-n={namespace}", f"--kubeconfig={kubeconfig}"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)


def test_the_command_moves_leadership_to_the_named_pod(
    spawn: Spawn, api: Any, cluster: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    procs = _three(spawn, api, namespace)
    kubeconfig = _operator(api, cluster, namespace, tmp_path)

    refused = _command("main", "--to=pod-z", kubeconfig=kubeconfig, namespace=namespace)
    assert refused.returncode == 1, refused
    assert refused.stderr.count("\n") == 1 and "pod-z is not a candidate" in refused.stderr
    assert leaders(procs) == ["pod-a"]

    done = _command("main", "--to=pod-b", kubeconfig=kubeconfig, namespace=namespace)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("main: pod-a -> pod-b in "), done.stdout
    wait_for(lambda: leaders(procs) == ["pod-b"], 5, what="pod-b alone leads")


def test_an_account_that_may_not_patch_leases_is_refused_in_one_line(
    spawn: Spawn, api: Any, cluster: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """``get`` alone (as for ``status``): the request cannot be written; one line says
    which permission is missing, and leadership stays where it was."""
    procs = _three(spawn, api, namespace)
    accounts.service_account(api, namespace, "viewer")
    accounts.grant(api, namespace, "viewer", "viewer", "coordination.k8s.io", "leases", ["get"])
    who = f"system:serviceaccount:{namespace}:viewer"
    accounts.wait_until_allowed(api, namespace, who, ["get"])
    kubeconfig = accounts.token_kubeconfig(tmp_path / "viewer", api, cluster, namespace, "viewer")
    refused = _command("main", "--to=pod-b", kubeconfig=kubeconfig, namespace=namespace)
    assert refused.returncode == 1, refused
    assert refused.stderr.count("\n") == 1, refused.stderr
    assert "forbidden: cannot patch leases in" in refused.stderr, refused.stderr
    assert "transfer needs get and patch on leases" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr
    time.sleep(2)
    assert leaders(procs) == ["pod-a"]


def test_the_leaders_app_moves_leadership_on_loopback(
    spawn: Spawn, api: Any, namespace: str
) -> None:
    a, b, c = _three(spawn, api, namespace)
    url = f"http://127.0.0.1:{a.port}/transfer?to=pod-c"
    with urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=2) as answer:
        assert answer.status == 202
    wait_for(lambda: leaders([a, b, c]) == ["pod-c"], 10, what="pod-c alone leads")
    assert (a.state() or {}).get("drain") is None  # the drain is over once it has moved
