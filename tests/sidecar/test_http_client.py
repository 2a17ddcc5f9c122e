"""The lean API client against the real API server: keep-alive and error mapping."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

import pytest

from sidecar.kube.config import load
from sidecar.kube.errors import Conflict, NotFound
from sidecar.kube.http import TLS_READ_BUFFER
from sidecar.kube.leases import LeaseStore
from tests.cluster import ControlPlane


def test_requests_reuse_one_keep_alive_connection(cluster: ControlPlane, namespace: str) -> None:
    async def go() -> list[Any]:
        store = LeaseStore(load(str(cluster.kubeconfig)), namespace)
        seen = []
        try:
            for _ in range(5):
                await store.list()
                assert len(store.api.http._idle) == 1
                seen.append(store.api.http._idle[0])
        finally:
            store.close()
        return seen

    connections = asyncio.run(go())
    assert all(c is connections[0] for c in connections), "a renew must not pay a TLS handshake"


def test_an_answer_of_many_tls_reads_arrives_whole(cluster: ControlPlane, namespace: str) -> None:
    """The client reads TLS ``TLS_READ_BUFFER`` bytes at a time (a record's plaintext at
    most): a list of some 400 KiB, over many reads and many records, is all there."""
    filler = "x" * 4000

    async def go() -> list[dict[str, Any]]:
        store = LeaseStore(load(str(cluster.kubeconfig)), namespace)
        try:
            for i in range(100):
                meta = {"name": f"leader-big-{i}", "annotations": {"filler": f"{i}{filler}"}}
                await store.create({"metadata": meta, "spec": {}})
            items, _ = await store.list()
            return items
        finally:
            store.close()

    items = asyncio.run(go())
    assert len(json.dumps(items)) > 25 * TLS_READ_BUFFER
    assert sorted(i["metadata"]["annotations"]["filler"] for i in items) == sorted(
        f"{i}{filler}" for i in range(100)
    )


def test_statuses_map_to_the_store_exceptions(cluster: ControlPlane, namespace: str) -> None:
    async def go() -> None:
        store = LeaseStore(load(str(cluster.kubeconfig)), namespace)
        try:
            assert await store.get("leader-none") is None
            with pytest.raises(NotFound):
                await store.delete("leader-none", "1")
            body = {"metadata": {"name": "leader-x", "labels": {}}, "spec": {"holderIdentity": "a"}}
            created = await store.create(body)
            with pytest.raises(Conflict):
                await store.create(body)  # already exists
            stale = {**created, "metadata": {**created["metadata"], "resourceVersion": "1"}}
            with pytest.raises(Conflict):
                await store.replace(stale)
            await store.delete("leader-x", created["metadata"]["resourceVersion"])
        finally:
            store.close()

    asyncio.run(go())


#: In a fresh interpreter: a request to the API server by the name given, verified over TLS,
#: then the threads running right after it and whether the ``idna`` codec got loaded on the
#: way (contract §1, footprint). Threads are counted inside the loop: ``asyncio.run`` joins
#: its executor's (the resolver's) on the way out.
_REQUEST = """
import asyncio, json, sys, threading
from sidecar.kube.config import tls_context
from sidecar.kube.http import HttpClient
async def ask():
    http = HttpClient(sys.argv[1], int(sys.argv[2]), tls_context(cafile=sys.argv[3]))
    try:
        status = (await http.request("GET", "/version", [], timeout=30)).status
        return {"status": status, "threads": threading.active_count()}
    finally:
        http.close()
seen = asyncio.run(ask())
print(json.dumps({**seen, "idna": "encodings.idna" in sys.modules}))
"""


def _request_in_a_fresh_interpreter(cluster: ControlPlane, host: str) -> dict[str, Any]:
    port = load(str(cluster.kubeconfig)).port
    done = subprocess.run(
        [sys.executable, "-c", _REQUEST, host, str(port), str(cluster.ca_file)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    seen: dict[str, Any] = json.loads(done.stdout)
    assert isinstance(seen["status"], int)  # answered: the TLS handshake verified the server
    return seen


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_the_server_is_verified_by_address_or_name_without_loading_the_idna_codec(
    cluster: ControlPlane, host: str
) -> None:
    """An ASCII name goes to ssl and to the resolver as bytes: the certificate is still
    checked against it, and the codec with its unicodedata tables is never loaded."""
    assert _request_in_a_fresh_interpreter(cluster, host)["idna"] is False


def test_a_request_to_an_address_starts_no_thread(cluster: ControlPlane) -> None:
    """A name is resolved in a thread of asyncio's executor; an address (the API server's
    in a pod) is connected as it is, and the process keeps its one thread."""
    assert _request_in_a_fresh_interpreter(cluster, "127.0.0.1")["threads"] == 1
