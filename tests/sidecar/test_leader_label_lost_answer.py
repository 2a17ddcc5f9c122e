"""The leader label when the API server applied a patch but its answer was lost (issue 38).

A real sidecar reaches the real API server through ``apiproxy``, which forwards
the label's patches and drops their answers; helpers and the grant fixture:
``test_leader_label``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests import accounts
from tests.cluster import ControlPlane
from tests.sidecar.apiproxy import ApiProxy, label_patch, lease_write
from tests.sidecar.proc import wait_for
from tests.sidecar.test_leader_label import (
    SA,
    label_grant,  # noqa: F401 (the fixture)
    labelled,
    make_pod,
    pod_sidecar,
    wait_for_policy,
)

pytestmark = pytest.mark.usefixtures("label_grant")


def test_a_label_put_applied_but_unanswered_comes_off_after_a_step_down(
    cluster: ControlPlane, api: Any, namespace: str, tmp_path: Path
) -> None:
    """Issue 38: the put of the label is applied but its answer lost (a 500 after the API
    server applied it), and the pod steps down meanwhile. The label is on, though the
    sidecar never heard so: it must come off, not wait for the pod to lead again."""
    make_pod(api, namespace, "a")
    make_pod(api, namespace, "b")  # wait_for_policy tries its patch on b
    wait_for_policy(cluster, accounts.token(api, namespace, SA, bound_to_pod="a"), namespace)
    proxy = ApiProxy(cluster.server, str(cluster.ca_file)).start()
    proxy.rules.append((label_patch("a", "true"), "lose"))
    a = pod_sidecar(cluster, api, namespace, tmp_path, "a", server=proxy.url)
    try:
        wait_for(a.leads, 30, what="a to lead")
        wait_for(lambda: proxy.requests("lose"), 10, what="a label put whose answer is lost")
        assert proxy.requests("lose")[0].upstream == 200  # applied by the API server
        assert labelled(api, namespace, ["a"]) == ["a"]

        # Every Lease write refused from now on: a cannot renew, steps down, stays down.
        proxy.rules.insert(0, (lease_write, "refuse"))
        wait_for(lambda: not a.leads(), 10, what="a to step down")
        wait_for(
            lambda: not labelled(api, namespace, ["a"]), 10, what="the label off a, not leading"
        )
        assert not a.leads()
        assert a.alive
    finally:
        a.stop()
        proxy.close()
        print(f"----- a -----\n{a.raw_log()[-3000:]}")
