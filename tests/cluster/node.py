"""A real Kubernetes node beside the test control plane: containerd, runc, CNI, kubelet,
kube-proxy, kube-scheduler and CoreDNS, all on this machine's loopback and one bridge.

``Node.start`` returns when the Node is Ready and CoreDNS answers through its
Service IP; pods then run for real: probes, native sidecars, SIGTERM order,
mounted ServiceAccount tokens, emptyDirs. ``Node.stop`` leaves nothing behind:
no process, mount, bridge, nftables table or ``kubepods`` cgroup, and every
kernel setting restored (``kernel.Snapshot``).

One node per machine: the bridge, nftables and sysctls are machine-wide, so a
node holds an exclusive lock (``LOCK_FILE``) for as long as its kubelet lives;
the lock's file descriptor is inherited by the kubelet and containerd, so a
node left running by ``python -m tests.cluster start --node`` keeps it too.

Settings this machine needs (docs/contract.md §10): containerd restricts
``oom_score_adj`` and the kubelet uses 0 (no CAP_SYS_RESOURCE here); the
cgroupfs driver on cgroup v1; the API server on the bridge address; NodePorts
only on the bridge address.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import binaries, coredns, host, kernel, network, nodeimages
from .controlplane import ControlPlane, State, free_port

NODE_NAME = "grelmicro-node"
LOCK_FILE = Path("/run/grelmicro-sidecar-node.lock")
CGROUP_ROOT = Path("/sys/fs/cgroup")
# Paths outside the node's directory that a kubelet or containerd may create anyway.
GLOBAL_PATHS = (
    "/run/containerd",
    "/var/log/pods",
    "/var/log/containers",
    "/var/lib/cni",
    "/var/lib/kubelet",
    "/var/lib/containerd",
    "/etc/cni",
    "/opt/cni",
    "/opt/containerd",
    "/run/nri",
    "/var/run/netns",
    "/etc/kubernetes",
)


class NodeUnsupported(RuntimeError):
    """This machine cannot run a node; the message says why in one line."""


def _log(msg: str) -> None:
    print(f"[tests.cluster.node] {msg}", file=sys.stderr, flush=True)


class Node:
    """One node and the control plane it joins, both in ``workdir``."""

    def __init__(self, workdir: Path, kubeconfig: Path | None = None) -> None:
        self.workdir = workdir.resolve()
        self.plane = ControlPlane(
            self.workdir / "plane",
            kubeconfig or self.workdir / "admin.kubeconfig",
            address=network.HOST_IP,
            node_name=NODE_NAME,
        )
        self.bins: dict[str, Path] = {}
        self._lock_fd: int | None = None
        self.timings: dict[str, float] = {}

    # ---- paths -------------------------------------------------------------
    @property
    def run(self) -> Path:
        return self.workdir / "run"

    @property
    def kubeconfig(self) -> Path:
        return self.plane.kubeconfig

    @property
    def containerd_socket(self) -> Path:
        return self.run / "containerd" / "containerd.sock"

    @property
    def registry_hosts(self) -> Path:
        """containerd's registry ``config_path``: a ``<host>/hosts.toml`` here redirects pulls
        of that host (read at every pull; ``registry.Registry.mirror`` writes one)."""
        return self.run / "certs.d"

    @property
    def _record(self) -> Path:
        return self.workdir / "node.json"

    # ---- acting on running pods, as a crash or a stall would ------------------
    def kill_container(self, container_id: str, sig: str = "SIGKILL") -> None:
        """Signal a container's task through containerd (``containerd://ID`` or ``ID``)."""
        self.ctr("tasks", "kill", "--signal", sig, container_id.removeprefix("containerd://"))

    def freeze_pod(self, uid: str, frozen: bool = True) -> None:
        """Freeze (or thaw) every process of a pod at once through its freezer cgroup.

        The whole pod stops as a paused VM or a stalled node would stop it: the
        app, the sidecar and the sandbox, with their clocks running on.
        """
        found = list((CGROUP_ROOT / "freezer" / "kubepods").rglob(f"pod{uid}"))
        if len(found) != 1:
            raise RuntimeError(f"expected one freezer cgroup for pod {uid}, found {found}")
        want = "FROZEN" if frozen else "THAWED"
        (found[0] / "freezer.state").write_text(want)
        deadline = time.monotonic() + 10
        while (found[0] / "freezer.state").read_text().strip() != want:
            if time.monotonic() > deadline:
                raise RuntimeError(f"pod {uid} did not become {want}")
            time.sleep(0.05)

    def pod_volume(self, uid: str, volume: str) -> Path:
        """Where the kubelet keeps a pod's emptyDir on this machine."""
        return self.run / "kubelet" / "pods" / uid / "volumes" / "kubernetes.io~empty-dir" / volume

    # ---- start -------------------------------------------------------------
    def start(self, timeout: float = 180.0) -> None:
        reason = host.unsupported_reason()
        if reason:
            raise NodeUnsupported(reason)
        host.ensure_packages()
        t0 = time.monotonic()
        self.bins = binaries.ensure_all(binaries.CONTROL_PLANE + binaries.NODE)
        images = nodeimages.node_images()
        self.timings["binaries"] = time.monotonic() - t0
        self._take_lock()
        t0 = time.monotonic()
        try:
            self.workdir.mkdir(parents=True, exist_ok=True)
            self.run.mkdir(exist_ok=True)
            self._record_host()
            network.create_bridge()
            network.install_forward_policy()
            kernel.write("net.ipv4.ip_forward", "1")
            self.plane.start(timeout=timeout)
            self._start_containerd()
            for image in images:
                self.ctr("images", "import", "--platform=linux/amd64", str(image.path))
            self._start_kubelet()
            self._start_kube_proxy()
            self._start_scheduler()
            self._wait(self._node_ready, timeout, "the Node to be Ready", "kubelet")
            self.timings["node_ready"] = time.monotonic() - t0
            self.plane.kubectl("apply", "-f", "-", input=coredns.manifests(images[1].name))
            self._wait(coredns.answers, timeout, "CoreDNS to answer at 10.0.0.10", "kubelet")
            self.timings["ready"] = time.monotonic() - t0
        except BaseException:
            self.stop()
            raise

    def _take_lock(self) -> None:
        LOCK_FILE.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _log(
                f"another node runs on this machine (it holds {LOCK_FILE}); waiting for it to stop ..."
            )
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.set_inheritable(fd, True)
        self._lock_fd = fd

    def _record_host(self) -> None:
        """What the machine looked like before the node, so ``stop`` can put it back."""
        kernel.Snapshot.take().save(self.workdir / "kernel.json")
        record = {
            "tables": network.Tables.record().before,
            "global_paths": [p for p in GLOBAL_PATHS if os.path.lexists(p)],
        }
        self._record.write_text(json.dumps(record, indent=1))

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        fds = (self._lock_fd,) if self._lock_fd is not None else ()
        self.plane._spawn(name, argv, pass_fds=fds, env=env)

    def _start_containerd(self) -> None:
        bindir = self.bins["containerd"].parent
        cni_bin = self.bins["bridge"].parent
        root, state = self.run / "containerd-root", self.run / "containerd"
        config = self.run / "containerd.toml"
        self.registry_hosts.mkdir(exist_ok=True)
        config.write_text(
            _containerd_config(
                root=root,
                state=state,
                socket=self.containerd_socket,
                runc=self.bins["runc"],
                runc_root=self.run / "runc",
                cni_bin=cni_bin,
                cni_conf=self.run / "cni-conf",
                opt=self.run / "opt",
                registry_hosts=self.registry_hosts,
            )
        )
        network.cni_config(self.run / "cni-conf", self.run / "cni-ipam")
        env = dict(
            os.environ, PATH=f"{bindir}:{self.bins['runc'].parent}:{os.environ.get('PATH', '')}"
        )
        self._spawn("containerd", [str(self.bins["containerd"]), f"--config={config}"], env=env)
        self._wait(
            lambda: self.containerd_socket.exists() and self._ctr_ok(),
            60,
            "containerd's socket",
            "containerd",
        )

    def _ctr_ok(self) -> bool:
        return self.ctr("version", check=False).returncode == 0

    def ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``ctr`` in the Kubernetes namespace of this node's containerd."""
        return subprocess.run(
            [
                str(self.bins["ctr"]),
                f"--address={self.containerd_socket}",
                "--namespace=k8s.io",
                *args,
            ],
            capture_output=True,
            text=True,
            check=check,
        )

    def load_images(self, archives: list[Any]) -> None:
        """Import image archives (``ImageArchive``: name and path) into the node's containerd."""
        for archive in archives:
            self.ctr("images", "import", "--platform=linux/amd64", str(archive.path))

    def _start_kubelet(self) -> None:
        pki = self.plane.pki
        root = self.run / "kubelet"
        root.mkdir(exist_ok=True)
        resolv = self.run / "resolv.conf"
        resolv.write_text("")  # pods get cluster DNS only; the host's resolvers stay out of them
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": network.HOST_IP,
            "port": 10250,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": free_port(),
            "authentication": {
                "x509": {"clientCAFile": str(pki / "ca.crt")},
                "webhook": {"enabled": True},
                "anonymous": {"enabled": False},
            },
            "authorization": {"mode": "Webhook"},
            "tlsCertFile": str(pki / "kubelet.crt"),
            "tlsPrivateKeyFile": str(pki / "kubelet.key"),
            "cgroupDriver": "cgroupfs",
            "failCgroupV1": False,
            "oomScoreAdj": 0,
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "clusterDNS": [network.DNS_SERVICE_IP],
            "clusterDomain": "cluster.local",
            "resolvConf": str(resolv),
            "podLogsDir": str(self.run / "pod-logs"),
            "evictionHard": {
                "memory.available": "1Mi",
                "nodefs.available": "1%",
                "nodefs.inodesFree": "1%",
                "imagefs.available": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
            "failSwapOn": False,
            "protectKernelDefaults": False,
            "shutdownGracePeriod": "0s",
            "rotateCertificates": False,
            "serverTLSBootstrap": False,
            "syncFrequency": "10s",
            "fileCheckFrequency": "10s",
        }
        path = self.run / "kubelet.json"
        path.write_text(json.dumps(config, indent=1))
        self._spawn(
            "kubelet",
            [
                str(self.bins["kubelet"]),
                f"--config={path}",
                f"--kubeconfig={self.plane.workdir / 'kubelet.kubeconfig'}",
                f"--root-dir={root}",
                f"--node-ip={network.HOST_IP}",
                f"--hostname-override={NODE_NAME}",
                "--v=1",
            ],
        )

    def _start_kube_proxy(self) -> None:
        self._spawn(
            "kube-proxy",
            [
                str(self.bins["kube-proxy"]),
                f"--kubeconfig={self.plane.workdir / 'kube-proxy.kubeconfig'}",
                "--proxy-mode=nftables",
                f"--hostname-override={NODE_NAME}",
                f"--cluster-cidr={network.POD_CIDR}",
                "--masquerade-all",
                f"--nodeport-addresses={network.HOST_IP}/32",
                "--conntrack-max-per-core=0",
                "--conntrack-tcp-timeout-established=0s",
                "--conntrack-tcp-timeout-close-wait=0s",
                f"--healthz-bind-address=127.0.0.1:{free_port()}",
                f"--metrics-bind-address=127.0.0.1:{free_port()}",
                "--v=1",
            ],
        )

    def _start_scheduler(self) -> None:
        kubeconfig = self.plane.workdir / "kube-scheduler.kubeconfig"
        self._spawn(
            "kube-scheduler",
            [
                str(self.bins["kube-scheduler"]),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                "--v=1",
            ],
        )

    def _node_ready(self) -> bool:
        out = self.plane.kubectl("get", "node", NODE_NAME, "-o", "json", check=False)
        if out.returncode != 0:
            return False
        conditions = json.loads(out.stdout).get("status", {}).get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    def _wait(self, ok: Any, timeout: float, what: str, log: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.plane.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"{name} exited with {proc.returncode} while waiting for {what}:\n{self.plane.log_tail(name)}"
                    )
            if ok():
                return
            time.sleep(0.2)
        raise TimeoutError(
            f"timed out after {timeout}s waiting for {what}:\n{self.plane.log_tail(log)}"
        )

    # ---- stop --------------------------------------------------------------
    def stop(self) -> list[str]:
        """Stop everything and put the machine back; return what could not be cleaned.

        Every step runs even when an earlier one failed (a failure is reported,
        never allowed to leave the rest of the machine dirty).
        """
        problems: list[str] = []
        plane = self.plane
        record = json.loads(self._record.read_text()) if self._record.exists() else None
        snapshot = self.workdir / "kernel.json"

        def stop_process(*names: str) -> None:
            if plane.state is not None:
                for name in names:
                    plane.stop_process(name)

        def kube_proxy_cleanup() -> None:
            stop_process("kube-proxy")
            if "kube-proxy" in self.bins:
                cleanup = [str(self.bins["kube-proxy"]), "--cleanup", "--proxy-mode=nftables"]
                subprocess.run(cleanup, capture_output=True)

        def remove_tables() -> None:
            if record is not None:
                network.Tables(record["tables"]).remove_new()

        def restore_kernel() -> None:
            if snapshot.exists():
                left = kernel.Snapshot.load(snapshot).restore()
                problems.extend(f"sysctl {k} is {now}, was {old}" for k, (old, now) in left.items())

        def remove_global_paths() -> None:
            if record is not None:
                for path in GLOBAL_PATHS:
                    if path not in record["global_paths"] and os.path.lexists(path):
                        shutil.rmtree(path, ignore_errors=True)

        steps: list[tuple[str, Callable[[], object]]] = [
            ("stop kubelet and scheduler", lambda: stop_process("kube-scheduler", "kubelet")),
            ("kill pod processes", self._kill_pods),
            ("stop containerd", lambda: stop_process("containerd")),
            ("kill stray shims", self._kill_strays),
            ("unmount", self._unmount_all),
            ("remove cgroups", lambda: problems.extend(self._remove_cgroups())),
            ("kube-proxy cleanup", kube_proxy_cleanup),
            ("remove nftables tables", remove_tables),
            ("delete the bridge", network.delete_bridge),
            ("restore kernel settings", restore_kernel),
            ("stop the control plane", plane.stop),
            ("remove created paths", remove_global_paths),
        ]
        for what, step in steps:
            try:
                step()
            except Exception as err:  # reported; the next steps still run
                problems.append(f"{what} failed: {err!r}")
        problems += self.leftovers()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        return sorted(set(problems))

    def leftovers(self) -> list[str]:
        """What a stopped node left on the machine (empty when it put everything back)."""
        found: list[str] = []
        node_binaries = {
            str(self.bins[b])
            for b in (
                "containerd",
                "containerd-shim-runc-v2",
                "kubelet",
                "kube-proxy",
                "kube-scheduler",
                "coredns",
            )
            if b in self.bins
        }
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                with contextlib.suppress(OSError):
                    exe = os.readlink(proc / "exe")
                    if exe in node_binaries or exe.endswith("/pause"):
                        found.append(f"process {proc.name} ({exe}) still runs")
        prefix = str(self.workdir) + "/"
        found += [
            f"mount {line.split()[4]} remains"
            for line in Path("/proc/self/mountinfo").read_text().splitlines()
            if line.split()[4].startswith(prefix)
        ]
        if network.run("ip", "link", "show", network.BRIDGE, check=False).returncode == 0:
            found.append(f"bridge {network.BRIDGE} remains")
        found += [f"cgroup {p} remains" for p in self._kubepods()]
        if self._record.exists():
            record = json.loads(self._record.read_text())
            found += [
                f"nftables table {t} remains"
                for t in sorted(network.Tables(record["tables"]).added())
            ]
            found += [
                f"{p} was created and remains"
                for p in GLOBAL_PATHS
                if p not in record["global_paths"] and os.path.lexists(p)
            ]
        snapshot = self.workdir / "kernel.json"
        if snapshot.exists():
            found += [
                f"sysctl {k} is {now}, was {old}"
                for k, (old, now) in kernel.Snapshot.load(snapshot).differences().items()
            ]
        return found

    def _kubepods(self) -> list[Path]:
        """Every ``kubepods`` cgroup directory, one per hierarchy, deepest first."""
        found: list[Path] = []
        for hierarchy in CGROUP_ROOT.iterdir():
            top = hierarchy / "kubepods"
            # Bottom-up, and tolerant of cgroups the kubelet or runc remove meanwhile.
            for directory, _, _ in os.walk(top, topdown=False, onerror=lambda _: None):
                found.append(Path(directory))
        return found

    def _kill_pods(self) -> None:
        """SIGKILL every process of every pod (containers and sandboxes) in the kubepods cgroups."""
        for _ in range(20):
            pids = set()
            for cgroup in self._kubepods():
                with contextlib.suppress(OSError):
                    pids |= {int(p) for p in (cgroup / "cgroup.procs").read_text().split()}
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)

    def _kill_strays(self) -> None:
        """Shims that outlived containerd (they are reparented, not children of it)."""
        shim = str(self.bins.get("containerd-shim-runc-v2", ""))
        if not shim:
            return
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                if os.readlink(proc / "exe") == shim:
                    os.kill(int(proc.name), signal.SIGKILL)

    def _unmount_all(self) -> None:
        """Every mount under the node's directory, deepest first."""
        prefix = str(self.workdir) + "/"
        for _ in range(5):
            mounts = [
                line.split()[4]
                for line in Path("/proc/self/mountinfo").read_text().splitlines()
                if line.split()[4].startswith(prefix)
            ]
            if not mounts:
                return
            for mount in sorted(set(mounts), key=lambda m: -m.count("/")):
                subprocess.run(["umount", "-l", mount], capture_output=True)

    def _remove_cgroups(self) -> list[str]:
        left: list[str] = []
        for cgroup in self._kubepods():
            for _ in range(50):
                try:
                    cgroup.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)
            else:
                left.append(f"cgroup {cgroup} could not be removed")
        return left

    def remove(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)

    @classmethod
    def attach(cls, workdir: Path, kubeconfig: Path) -> Node:
        """The node that ``start --node`` left running in ``workdir``."""
        node = cls(workdir, kubeconfig)
        data = json.loads((node.plane.workdir / "state.json").read_text())
        node.plane.state = State(**data)
        node.bins = binaries.ensure_all(binaries.CONTROL_PLANE + binaries.NODE)
        return node


def _containerd_config(
    *,
    root: Path,
    state: Path,
    socket: Path,
    runc: Path,
    runc_root: Path,
    cni_bin: Path,
    cni_conf: Path,
    opt: Path,
    registry_hosts: Path,
) -> str:
    return f"""\
version = 4
root = '{root}'
state = '{state}'
imports = []
disabled_plugins = [
  'io.containerd.nri.v1.nri',
  'io.containerd.snapshotter.v1.devmapper',
  'io.containerd.snapshotter.v1.zfs',
  'io.containerd.snapshotter.v1.btrfs',
  'io.containerd.snapshotter.v1.blockfile',
  'io.containerd.snapshotter.v1.erofs',
  'io.containerd.differ.v1.erofs',
  'io.containerd.image-verifier.v1.bindir',
  'io.containerd.grpc.v1.grpc-tcp',
]

[plugins]
  [plugins.'io.containerd.server.v1.grpc']
    address = '{socket}'

  [plugins.'io.containerd.server.v1.ttrpc']
    address = '{socket}.ttrpc'

  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = '{nodeimages.PAUSE_IMAGE}'
    [plugins.'io.containerd.cri.v1.images'.registry]
      config_path = '{registry_hosts}'

  [plugins.'io.containerd.cri.v1.runtime']
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    enable_unprivileged_ports = true
    enable_unprivileged_icmp = true
    cdi_spec_dirs = []
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = '{runc}'
          Root = '{runc_root}'
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ['{cni_bin}']
      conf_dir = '{cni_conf}'
      max_conf_num = 1

  [plugins.'io.containerd.internal.v1.opt']
    path = '{opt}'
"""
