"""``python -m tests.cluster build|start|stop`` for humans, the demo and benchmarks.

``start`` returns once ``/readyz`` answers ok and leaves the control plane
running detached, its pids, logs and data in ``<kubeconfig>.cluster/``;
``stop`` stops every process it started and removes that directory.
``start --node`` also runs a real node (``node.py``) and returns when the Node
is Ready and CoreDNS answers; ``stop`` then also puts the machine back.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from . import binaries, host, images, nodeimages
from .controlplane import ControlPlane, detached_workdir
from .node import Node, NodeUnsupported


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.cluster")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser(
        "build",
        help="build (or reuse) the control plane's binaries and Prometheus, and where a node can run, the node's and the images",
    )
    for name in ("start", "stop"):
        p = sub.add_parser(name)
        p.add_argument(
            "--kubeconfig", required=True, type=Path, help="admin kubeconfig to write/read"
        )
    sub.choices["start"].add_argument(
        "--node",
        action="store_true",
        help="also run a node (kubelet, containerd, CNI, kube-proxy, scheduler, CoreDNS); needs root",
    )
    sub.add_parser("paths", help="print the cached binaries' paths")
    args = parser.parse_args(argv)

    if args.command == "build":
        t0 = time.monotonic()
        paths = binaries.ensure_all()
        print(f"control-plane binaries ready in {time.monotonic() - t0:.1f}s:")
        for name, path in paths.items():
            print(f"  {name}: {path}")
        t0 = time.monotonic()
        paths = binaries.ensure_all(binaries.MONITORING)
        print(f"Prometheus and promtool ready in {time.monotonic() - t0:.1f}s:")
        for name, path in paths.items():
            print(f"  {name}: {path}")
        reason = host.unsupported_reason()
        if reason:
            print(f"no node on this machine ({reason}): node binaries and images not built")
            return 0
        t0 = time.monotonic()
        host.ensure_packages()
        binaries.ensure_all(binaries.NODE)
        archives = nodeimages.node_images()
        print(f"node binaries and images ready in {time.monotonic() - t0:.1f}s")
        t0 = time.monotonic()
        archives += images.product_images()
        print(f"product image and app stand-in ready in {time.monotonic() - t0:.1f}s:")
        for archive in archives:
            print(f"  {archive.name}: {archive.path}")
        return 0
    if args.command == "paths":
        for name, path in binaries.ensure_all().items():
            print(f"{name}={path}")
        return 0
    if args.command == "start":
        workdir = detached_workdir(args.kubeconfig)
        if (workdir / "state.json").exists() or (workdir / "node.json").exists():
            print(
                f"a control plane is already recorded in {workdir}; run stop first", file=sys.stderr
            )
            return 2
        if args.node:
            node = Node(workdir, args.kubeconfig)
            t0 = time.monotonic()
            try:
                node.start()
            except NodeUnsupported as err:
                print(f"cannot run a node here: {err}", file=sys.stderr)
                return 2
            except BaseException:
                node.remove()  # start() already stopped what it had started
                raise
            print(
                f"node ready in {time.monotonic() - t0:.1f}s at {node.plane.server} ({node.timings})"
            )
            print(f"kubeconfig: {node.kubeconfig}  logs: {node.plane.logs}")
            return 0
        plane = ControlPlane(workdir, args.kubeconfig, detached=True)
        binaries.ensure("kubernetes")
        binaries.ensure("etcd")
        t0 = time.monotonic()
        plane.start()
        print(f"control plane ready in {time.monotonic() - t0:.1f}s at {plane.server}")
        print(f"kubeconfig: {plane.kubeconfig}  logs: {plane.logs}")
        return 0
    # stop
    workdir = detached_workdir(args.kubeconfig)
    if (workdir / "node.json").exists():
        node = Node.attach(workdir, args.kubeconfig)
        problems = node.stop()
        node.remove()
        for problem in problems:
            print(f"left behind: {problem}", file=sys.stderr)
        print("node and control plane stopped")
        return 1 if problems else 0
    if not (workdir / "state.json").exists():
        print(f"no control plane recorded in {workdir}", file=sys.stderr)
        return 0
    plane = ControlPlane.attach(args.kubeconfig)
    plane.stop()
    plane.remove()
    print("control plane stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
