"""The CPython floor: what any asyncio program pays to watch one Lease over TLS.

Not an elector. It loads the interpreter, ``asyncio`` and ``ssl``, builds one
TLS context from a kubeconfig (CA and client certificate), opens one watch on
one Lease and reads it until the server ends it. The bench runs it with the
sidecar's interpreter beside the elections it measures, so the footprint table
can say how much of the sidecar's RSS is the platform it runs on and how much
is its own code: nothing a Python elector does can cost less than this.

Run as a program: ``python bench/floor.py KUBECONFIG NAMESPACE LEASE``. It
imports nothing from this repository, on purpose. Anything but a 200 to the
watch ends it with status 1, so the bench reports no floor rather than the
RSS of a program that did not watch.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import ssl
import sys
import tempfile
from typing import Any


def tls(kubeconfig: dict[str, Any]) -> tuple[str, int, ssl.SSLContext]:
    """Host, port and a client TLS context from a kubeconfig's first cluster and user."""
    cluster = kubeconfig["clusters"][0]["cluster"]
    user = kubeconfig["users"][0]["user"]
    host, port = cluster["server"].removeprefix("https://").rsplit(":", 1)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(
        cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
    )
    with tempfile.TemporaryDirectory() as keys:
        cert, key = os.path.join(keys, "cert.pem"), os.path.join(keys, "key.pem")
        for path, field in ((cert, "client-certificate-data"), (key, "client-key-data")):
            with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as out:
                out.write(base64.b64decode(user[field]))
        context.load_cert_chain(cert, key)
    return host, int(port), context


async def watch(host: str, port: int, context: ssl.SSLContext, namespace: str, lease: str) -> None:
    reader, writer = await asyncio.open_connection(
        host, port, ssl=context, server_hostname=host.encode()
    )
    path = (
        f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        f"?watch=1&fieldSelector=metadata.name%3D{lease}"
    )
    writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    status = await reader.readline()
    if status.split()[1:2] != [b"200"]:
        raise SystemExit(f"floor: the watch was answered {status.decode().strip()!r}")
    while await reader.read(65536):
        pass


def main() -> int:
    kubeconfig, namespace, lease = sys.argv[1:4]
    with open(kubeconfig) as f:
        host, port, context = tls(json.load(f))
    asyncio.run(watch(host, port, context, namespace, lease))
    return 0


if __name__ == "__main__":
    sys.exit(main())
