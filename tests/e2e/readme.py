"""README's command blocks, run word for word as a user at a terminal would run them.

``block(heading)`` is the first fenced ``sh`` block under a README heading
(``## Install on your cluster``): the commands a user copies, unchanged.
``UserShell.run`` runs such a block with bash, stopping at the first command
that fails, each command echoed into the output, with:

- ``kubectl`` and ``helm`` on ``PATH`` (the ones built here), ``KUBECONFIG``
  the test cluster's, and a ``HOME`` (helm's cache, config, registry logins)
  of its own, so nothing of the machine's user is read or written;
- with a ``registry`` (``tests/cluster/registry.py``): a private mount
  namespace (``unshare --mount``, root) whose ``/etc/hosts`` maps the public
  registry's host to the one on this machine, and ``SSL_CERT_FILE`` trusting
  its throwaway CA. Only that process tree sees the override: the namespace
  ends with it, and nothing on the machine is changed.

A missing heading or block fails with one line naming it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tests.cluster import binaries
from tests.cluster.registry import Registry

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


class MissingBlock(AssertionError):
    """README has no such heading, or no ``sh`` block under it."""


def block(heading: str, readme: Path = README) -> str:
    """The first fenced ``sh`` block after ``heading`` and before the next heading of its level."""
    text = readme.read_text()
    found = re.search(rf"^{re.escape(heading)}[ \t]*$", text, re.M)
    if found is None:
        raise MissingBlock(f"{readme.name} has no heading '{heading}'")
    level = heading.split(" ", 1)[0]
    section = re.split(rf"^{re.escape(level)} ", text[found.end() :], maxsplit=1, flags=re.M)[0]
    fenced = re.search(r"^```sh[ \t]*\n(.*?)^```[ \t]*$", section, re.M | re.S)
    if fenced is None:
        raise MissingBlock(f"{readme.name} has no ```sh block under '{heading}'")
    return fenced.group(1)


@dataclass(frozen=True)
class Ran:
    returncode: int
    output: str  # stdout and stderr interleaved, each command echoed with a leading '+'

    @property
    def ok(self) -> bool:
        return self.returncode == 0


@dataclass
class UserShell:
    kubeconfig: Path
    home: Path
    registry: Registry | None = None
    env: dict[str, str] = field(default_factory=dict)

    def environment(self) -> dict[str, str]:
        tools = {
            binaries.ensure("kubernetes")["kubectl"].parent,
            binaries.ensure("helm")["helm"].parent,
        }
        self.home.mkdir(parents=True, exist_ok=True)
        env = {
            "PATH": ":".join([*sorted(map(str, tools)), "/usr/sbin", "/usr/bin", "/sbin", "/bin"]),
            "HOME": str(self.home),
            "KUBECONFIG": str(self.kubeconfig),
            "HELM_CACHE_HOME": str(self.home / ".cache" / "helm"),
            "HELM_CONFIG_HOME": str(self.home / ".config" / "helm"),
            "HELM_DATA_HOME": str(self.home / ".local" / "share" / "helm"),
            "LANG": "C.UTF-8",
        }
        if self.registry is not None:
            env["SSL_CERT_FILE"] = str(self.registry.ca_bundle)
        env.update(self.env)
        return env

    def run(
        self, script: str, *, cwd: Path = ROOT, timeout: float = 600, trace: bool = True
    ) -> Ran:
        """``script`` as bash runs a pasted block: ``-e -o pipefail``, each command echoed
        (``-x``) unless ``trace`` is off (for an output to parse)."""
        self.home.mkdir(parents=True, exist_ok=True)
        path = self.home / "commands.sh"
        path.write_text(script)
        argv = ["bash", "-e", "-o", "pipefail", *(["-x"] if trace else []), str(path)]
        if self.registry is not None:
            if os.geteuid() != 0 or shutil.which("unshare") is None:
                raise AssertionError("a private /etc/hosts needs root and unshare (util-linux)")
            # The bind mount lives and dies with this private namespace.
            argv = [
                "unshare",
                "--mount",
                "--propagation=private",
                "--",
                "bash",
                "-c",
                'mount --bind "$0" /etc/hosts && exec "$@"',
                str(self.registry.hosts_file),
                *argv,
            ]
        done = subprocess.run(
            argv,
            cwd=cwd,
            env=self.environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
        )
        return Ran(done.returncode, done.stdout)
