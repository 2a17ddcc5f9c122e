"""The node's network: one bridge, a forward policy that keeps traffic on it, and cleanup.

Pods live on the bridge ``cni0`` (10.88.0.0/16, the host is 10.88.0.1). The
API server binds to the host's bridge address, because the kubelet's own
firewall rule drops traffic DNATed to 127.0.0.1 from pods. Pods get no
default route (only the Service range via the bridge), and our nftables table
drops every forwarded packet except bridge to bridge: nothing a pod sends can
leave the machine.

``Tables`` records which nftables tables existed before the node started, so
``remove_new`` deletes exactly the ones the kubelet, kube-proxy and the CNI
plugins added (iptables-nft's ``filter``/``nat``/``mangle`` included when the
machine had none).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

BRIDGE = "cni0"
POD_CIDR = "10.88.0.0/16"
HOST_IP = "10.88.0.1"
SERVICE_CIDR = "10.0.0.0/24"
KUBERNETES_SERVICE_IP = "10.0.0.1"
DNS_SERVICE_IP = "10.0.0.10"
TABLE = "grelmicro_node"  # our own nftables table (inet family)

FORWARD_RULES = f"""\
table inet {TABLE} {{
  chain forward {{
    type filter hook forward priority -10; policy drop;
    iifname "{BRIDGE}" oifname "{BRIDGE}" accept
  }}
}}
"""


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check)


def create_bridge() -> None:
    """The bridge with the host's address, up, before anything binds to that address."""
    if run("ip", "link", "show", BRIDGE, check=False).returncode != 0:
        run("ip", "link", "add", BRIDGE, "type", "bridge")
    prefix = ipaddress.ip_network(POD_CIDR).prefixlen
    addrs = run("ip", "-j", "addr", "show", BRIDGE).stdout
    if HOST_IP not in addrs:
        run("ip", "addr", "add", f"{HOST_IP}/{prefix}", "dev", BRIDGE)
    run("ip", "link", "set", BRIDGE, "up")
    # The host reaches Services (CoreDNS) from its bridge address, never from eth0's.
    run("ip", "route", "replace", SERVICE_CIDR, "dev", BRIDGE, "src", HOST_IP)


def delete_bridge() -> None:
    run("ip", "link", "delete", BRIDGE, check=False)


def install_forward_policy() -> None:
    subprocess.run(
        ["nft", "-f", "-"], input=FORWARD_RULES, text=True, check=True, capture_output=True
    )


def tables() -> set[str]:
    """Every nftables table as ``family name``."""
    data = json.loads(run("nft", "-j", "list", "tables").stdout or '{"nftables": []}')
    return {
        f"{item['table']['family']} {item['table']['name']}"
        for item in data.get("nftables", [])
        if "table" in item
    }


@dataclass
class Tables:
    before: list[str]

    @classmethod
    def record(cls) -> Tables:
        return cls(sorted(tables()))

    def added(self) -> set[str]:
        return tables() - set(self.before)

    def remove_new(self) -> None:
        for table in sorted(self.added()):
            family, name = table.split(" ", 1)
            run("nft", "delete", "table", family, name, check=False)


def cni_config(directory: Path, ipam_dir: Path) -> Path:
    """The CNI network: the bridge, host-local addresses, routes only to the Service range."""
    config = {
        "cniVersion": "1.0.0",
        "name": "grelmicro-node",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": False,
                "isDefaultGateway": False,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(ipam_dir),
                    "ranges": [
                        [{"subnet": POD_CIDR, "gateway": HOST_IP, "rangeStart": "10.88.1.1"}]
                    ],
                    "routes": [{"dst": SERVICE_CIDR, "gw": HOST_IP}],
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "10-grelmicro-node.conflist"
    path.write_text(json.dumps(config, indent=1))
    return path


def veths_on_bridge() -> list[str]:
    out = run("ip", "-j", "link", "show", "master", BRIDGE, check=False).stdout
    with contextlib.suppress(json.JSONDecodeError):
        return [link["ifname"] for link in json.loads(out or "[]")]
    return []
