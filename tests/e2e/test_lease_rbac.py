"""Lease RBAC a chart user can follow (issue 37, item 7), in real pods.

A user who has only the chart package and a new namespace: the Deployment's
pods are refused at creation with one line that names the command granting
the Leases, the same command NOTES.txt prints; run as written, the pods are
created and elect a leader. Nothing here comes from the repository but the
chart the session installed.
"""

from __future__ import annotations

import json
import re
import shlex
import uuid
from collections.abc import Iterator

import pytest

from tests.e2e.conftest import RELEASE_NAMESPACE, Cluster, wait_for
from tests.e2e.test_election import deployment, leaders, pods


@pytest.fixture
def bare_namespace(e2e: Cluster, release: str) -> Iterator[str]:
    """A new namespace as a user makes it: restricted, and no Lease RBAC."""
    name = f"n-{uuid.uuid4().hex[:8]}"
    e2e.kubectl("create", "namespace", name)
    e2e.kubectl("label", "namespace", name, "pod-security.kubernetes.io/enforce=restricted")
    try:
        yield name
    finally:
        e2e.kubectl("delete", "namespace", name, "--wait=false", check=False)


def _notes_command(e2e: Cluster, release: str) -> str:
    notes = e2e.helm("status", release, f"--namespace={RELEASE_NAMESPACE}").stdout
    match = re.search(r"kubectl create rolebinding[^\n]*\\\n[^\n]*", notes)
    assert match, notes
    return " ".join(match.group(0).replace("\\\n", " ").split())


def _refusal(e2e: Cluster, ns: str) -> str | None:
    events = e2e.json("get", "events", "-n", ns, "--field-selector", "reason=FailedCreate")
    messages = [e["message"] for e in events["items"]]
    return messages[0] if messages else None


def test_a_pod_without_leases_is_refused_naming_the_notes_command_which_fixes_it(
    e2e: Cluster, release: str, bare_namespace: str
) -> None:
    ns = bare_namespace
    e2e.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(deployment("worker", replicas=2)))
    refusal = wait_for(lambda: _refusal(e2e, ns), 60, "the pods' refusal")
    assert "denied the request: ServiceAccount" in refusal, refusal
    command = refusal.split("grant it, then create the pod again: ", 1)[1].strip()
    notes = _notes_command(e2e, release)
    assert command == notes.replace("<namespace>", ns).replace("<serviceaccount>", "default"), (
        command,
        notes,
    )
    assert command.startswith("kubectl create rolebinding ")
    e2e.kubectl(*shlex.split(command)[1:])  # run as written (our kubectl stands for the user's)

    wait_for(lambda: len(pods(e2e, ns, "worker")) == 2, 90, "the pods, once granted")
    assert len(wait_for(lambda: leaders(e2e, ns, "worker"), 90, "a leader")) == 1
    holder = e2e.json("get", "lease", "-n", ns, "leader-worker")["spec"]["holderIdentity"]
    assert holder in {p["metadata"]["name"] for p in pods(e2e, ns, "worker")}
