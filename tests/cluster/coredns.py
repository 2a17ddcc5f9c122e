"""Cluster DNS for the node: CoreDNS serving ``cluster.local`` at the Service IP 10.0.0.10.

Pods resolve Services by name (the injector's kopf connects to
``kubernetes.default.svc``), so a node without DNS is not a node users have.
CoreDNS forwards nothing: names outside the cluster do not resolve, because
nothing here may leave the machine. ``answers`` asks it through the Service
IP from the host, the way a pod would, with a hand-built DNS query.
"""

from __future__ import annotations

import json
import random
import socket
import struct

from .network import DNS_SERVICE_IP

COREFILE = """\
.:53 {
    errors
    health :8080
    ready :8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 30
}
"""


def manifests(image: str) -> str:
    """The CoreDNS objects as a kubectl-applyable JSON List."""
    labels = {"k8s-app": "kube-dns"}
    meta = lambda name: {"name": name, "namespace": "kube-system", "labels": labels}  # noqa: E731
    items = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta("coredns")},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "system:coredns"},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["endpoints", "services", "pods", "namespaces"],
                    "verbs": ["list", "watch"],
                },
                {
                    "apiGroups": ["discovery.k8s.io"],
                    "resources": ["endpointslices"],
                    "verbs": ["list", "watch"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "system:coredns"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:coredns",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "coredns", "namespace": "kube-system"}],
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": meta("coredns"),
            "data": {"Corefile": COREFILE},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta("coredns"),
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": "coredns",
                        "dnsPolicy": "Default",
                        "priorityClassName": "system-cluster-critical",
                        "securityContext": {
                            "runAsNonRoot": True,
                            "runAsUser": 65532,
                            "runAsGroup": 65532,
                        },
                        "containers": [
                            {
                                "name": "coredns",
                                "image": image,
                                "imagePullPolicy": "Never",
                                "args": ["-conf", "/etc/coredns/Corefile"],
                                "ports": [
                                    {"name": "dns", "containerPort": 53, "protocol": "UDP"},
                                    {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"},
                                ],
                                "readinessProbe": {
                                    "httpGet": {"path": "/ready", "port": 8181},
                                    "periodSeconds": 1,
                                },
                                "securityContext": {
                                    "allowPrivilegeEscalation": False,
                                    "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"]},
                                },
                                "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns"}],
                            }
                        ],
                        "volumes": [{"name": "config", "configMap": {"name": "coredns"}}],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {**meta("kube-dns")},
            "spec": {
                "selector": labels,
                "clusterIP": DNS_SERVICE_IP,
                "ports": [
                    {"name": "dns", "port": 53, "protocol": "UDP"},
                    {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
                ],
            },
        },
    ]
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})


def resolve(name: str, server: str = DNS_SERVICE_IP, timeout: float = 1.0) -> list[str]:
    """The A records of ``name`` from ``server`` (empty when it has none)."""
    qid = random.randrange(1 << 16)
    question = b"".join(bytes([len(p)]) + p.encode() for p in name.strip(".").split(".")) + b"\0"
    query = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0) + question + struct.pack(">HH", 1, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout)
        sock.sendto(query, (server, 53))
        reply, _ = sock.recvfrom(4096)
    rid, flags, _, ancount, _, _ = struct.unpack(">HHHHHH", reply[:12])
    if rid != qid or flags & 0x000F:
        return []
    pos = 12 + len(question) + 4
    out: list[str] = []
    for _ in range(ancount):
        if reply[pos] & 0xC0 == 0xC0:
            pos += 2
        else:
            while reply[pos]:
                pos += reply[pos] + 1
            pos += 1
        rtype, _, _, rdlen = struct.unpack(">HHIH", reply[pos : pos + 10])
        pos += 10
        if rtype == 1 and rdlen == 4:
            out.append(socket.inet_ntoa(reply[pos : pos + 4]))
        pos += rdlen
    return out


def answers(name: str = "kubernetes.default.svc.cluster.local") -> bool:
    try:
        return bool(resolve(name))
    except OSError:
        return False
