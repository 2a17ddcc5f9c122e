"""A real Prometheus for the tests: the binary built from the Go module proxy, run as a host process.

It discovers targets through the API server with the admin kubeconfig
(Kubernetes service discovery, as in a cluster) and scrapes pod IPs over the
node's bridge, as the other host tools reach pods. What to scrape and which
rules to evaluate are the caller's (``tests/e2e/monitoring`` derives both from
the chart); everything it writes lives in ``workdir``. Its HTTP API is read
with ``query``, ``alerts`` and ``targets``.

Test support only.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from . import binaries
from .controlplane import ControlPlane, free_port


def apiserver_scrape_config(plane: ControlPlane, interval: str) -> dict[str, Any]:
    """The API server's own /metrics as kube-prometheus scrapes it (job ``apiserver``)."""
    return {
        "job_name": "apiserver",
        "scrape_interval": interval,
        "scheme": "https",
        "tls_config": {
            "ca_file": str(plane.ca_file),
            "cert_file": str(plane.pki / "admin.crt"),
            "key_file": str(plane.pki / "admin.key"),
        },
        "static_configs": [{"targets": [plane.server.removeprefix("https://")]}],
    }


class Prometheus:
    """``prometheus`` with ``scrape_configs`` and the rule ``groups``, evaluated every ``interval``."""

    def __init__(
        self,
        workdir: Path,
        scrape_configs: list[dict[str, Any]],
        groups: list[dict[str, Any]],
        interval: str = "1s",
    ) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = {
            "global": {
                "scrape_interval": interval,
                "scrape_timeout": interval,
                "evaluation_interval": interval,
            },
            "rule_files": [str(workdir / "rules.yaml")],
            "scrape_configs": scrape_configs,
        }
        self.groups = groups
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / "prometheus.log"

    def write(self) -> Path:
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "rules.yaml").write_text(yaml.safe_dump({"groups": self.groups}))
        config = self.workdir / "prometheus.yaml"
        config.write_text(yaml.safe_dump(self.config, sort_keys=False))
        return config

    def start(self, timeout: float = 60) -> Prometheus:
        bins = binaries.ensure("prometheus")
        config = self.write()
        # Fail on a bad config or rule file with promtool's message, not a dead process.
        check = subprocess.run(
            [str(bins["promtool"]), "check", "config", str(config)],
            capture_output=True,
            text=True,
        )
        if check.returncode != 0:
            raise RuntimeError(f"promtool check config:\n{check.stdout}{check.stderr}")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    str(bins["prometheus"]),
                    f"--config.file={config}",
                    f"--storage.tsdb.path={self.workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--storage.tsdb.retention.time=1h",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while not self._ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"Prometheus did not become ready:\n{self.log()}")
            time.sleep(0.1)
        return self

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
                return int(resp.status) == 200
        except (urllib.error.URLError, OSError):
            return False

    def log(self) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text()[-4000:]
        return ""

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    # ---- the HTTP API ----------------------------------------------------------
    def api(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=10) as resp:
            body = json.loads(resp.read())
        if body.get("status") != "success":
            raise RuntimeError(f"/api/v1/{path}: {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result: one ``{"metric": labels, "value": [t, "v"]}`` per series."""
        data = self.api("query", query=expr)
        result: list[dict[str, Any]] = data["result"]
        return result

    def alerts(self, name: str | None = None) -> list[dict[str, Any]]:
        """Active alerts (pending and firing), as /api/v1/alerts lists them."""
        found: list[dict[str, Any]] = self.api("alerts")["alerts"]
        return [a for a in found if name is None or a["labels"].get("alertname") == name]

    def targets(self) -> list[dict[str, Any]]:
        active: list[dict[str, Any]] = self.api("targets", state="active")["activeTargets"]
        return active

    def rules(self) -> list[dict[str, Any]]:
        groups: list[dict[str, Any]] = self.api("rules")["groups"]
        return groups
