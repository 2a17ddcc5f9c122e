"""Settings of ``grelmicro-sidecar injector``, validated before anything starts.

Each flag can also come from ``GRELMICRO_INJECTOR_<FLAG>`` (upper case, ``-``
→ ``_``); the command line wins. Every problem is one line naming the flag (or
its env variable) and the accepted form; ``main`` turns it into exit code 2.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..core import defaults
from ..kit.options import (
    DNS_LABEL,
    INJECTOR_ENV,
    Parser,
    SettingsError,
    Source,
    UsageError,
)
from ..kit.options import env_name as _env_name
from .patch import SidecarSpec

__all__ = ["InjectorSettings", "SettingsError", "UsageError", "injector_settings", "parse_args"]

ENV_PREFIX = INJECTOR_ENV
DEFAULT_TLS_DIR = "/etc/grelmicro-sidecar/tls"
PULL_POLICIES = ("Always", "IfNotPresent", "Never")


def env_name(flag: str) -> str:
    return _env_name(INJECTOR_ENV, flag)


@dataclass(frozen=True)
class InjectorSettings:
    host: str
    port: int
    tls_cert_file: Path
    tls_key_file: Path
    health_port: int
    sidecar: SidecarSpec
    excluded_namespaces: tuple[str, ...]
    sweep_interval: float  # 0: no sweep
    sweep_margin: float
    auto_rbac: bool
    log_level: str
    kubeconfig: str | None


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog=f"{defaults.PROG} injector",
        description="Admission webhook that injects the leader-election sidecar into pods "
        'annotated leader-election.grelmicro.io/inject: "true". Each flag can also be set '
        f"by env {ENV_PREFIX}<FLAG> (upper case, '-' -> '_'); the flag wins.",
    )
    add = p.add_argument
    add("--host", help="address of the HTTPS webhook listener (default 0.0.0.0)")
    add("--port", help="HTTPS webhook port; the webhook path is /inject (default 8443)")
    add("--tls-cert-file", help=f"serving certificate, PEM (default {DEFAULT_TLS_DIR}/tls.crt)")
    add("--tls-key-file", help=f"serving key, PEM (default {DEFAULT_TLS_DIR}/tls.key)")
    add("--health-port", help="plain HTTP port for GET /healthz and /metrics (default 8080)")
    add("--sidecar-image", help="image of the injected sidecar (required)")
    add("--sidecar-image-pull-policy", help="Always, IfNotPresent or Never (default IfNotPresent)")
    add("--sidecar-cpu-request", help="CPU request of the sidecar (default 10m)")
    add("--sidecar-memory-request", help="memory request of the sidecar (default 32Mi)")
    add("--sidecar-memory-limit", help="memory limit of the sidecar (default 64Mi)")
    add("--lease-duration", help="default for pods without the annotation (default 15s)")
    add("--renew-deadline", help="default for pods without the annotation (default 10s)")
    add("--retry-period", help="default for pods without the annotation (default 2s)")
    add(
        "--excluded-namespaces",
        help="comma-separated namespaces never injected (default kube-system and $POD_NAMESPACE)",
    )
    add("--sweep-interval", help="period of the expired-Lease sweep; 0 disables (default 60s)")
    add("--sweep-margin", help="how long past expiry a Lease must be to be swept (default 60s)")
    add(
        "--auto-rbac",
        help="true: ensure a Role and RoleBinding on leases for the ServiceAccount of each "
        "injected pod (default false)",
    )
    add("--log-level", help="debug, info, warning or error (default info)")
    add("--kubeconfig", help="default: $KUBECONFIG, then ~/.kube/config, then in-cluster")
    add(
        "--print-webhook-config",
        action="store_true",
        help="print the MutatingWebhookConfiguration as JSON and exit; needs --ca-file and "
        "--webhook-url or --service-name/--service-namespace",
    )
    add("--ca-file", help="(with --print-webhook-config) PEM CA of the serving certificate")
    add("--webhook-url", help="(with --print-webhook-config) e.g. https://127.0.0.1:8443/inject")
    add("--service-name", help="(with --print-webhook-config) the injector's Service")
    add("--service-namespace", help="(with --print-webhook-config) the Service's namespace")
    add("--service-port", help="(with --print-webhook-config) the Service's port (default 443)")
    return p


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def injector_settings(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> InjectorSettings:
    src = Source(args, INJECTOR_ENV, environ)

    image = (src.raw("sidecar-image") or "").strip()
    if not image or any(ch.isspace() for ch in image):
        raise SettingsError(
            f"--sidecar-image (or {env_name('sidecar-image')}) is required: the image of the "
            "injected sidecar, e.g. --sidecar-image=ghcr.io/example/grelmicro-sidecar:0.1.0"
        )
    policy = src.choice("sidecar-image-pull-policy", "IfNotPresent", PULL_POLICIES)
    timing = src.timing()

    own = src.environ.get("POD_NAMESPACE") or None
    raw_excluded = src.raw("excluded-namespaces")
    if raw_excluded is None:
        excluded = ["kube-system", *([own] if own else [])]
    else:
        excluded = [n.strip() for n in raw_excluded.split(",") if n.strip()]
        for n in excluded:
            if not DNS_LABEL.fullmatch(n):
                src.fail(
                    "excluded-namespaces",
                    raw_excluded,
                    "a comma-separated list of namespace names, e.g. kube-system,ops",
                )

    level = src.log_level()
    host = src.raw("host") or "0.0.0.0"
    if not host.strip() or any(ch.isspace() for ch in host):
        src.fail("host", host, "an address to listen on, such as 0.0.0.0 or 127.0.0.1")

    return InjectorSettings(
        host=host,
        port=src.port("port", 8443),
        tls_cert_file=Path(src.raw("tls-cert-file") or f"{DEFAULT_TLS_DIR}/tls.crt"),
        tls_key_file=Path(src.raw("tls-key-file") or f"{DEFAULT_TLS_DIR}/tls.key"),
        health_port=src.port("health-port", 8080),
        sidecar=SidecarSpec(
            image=image,
            pull_policy=policy,
            cpu_request=src.quantity("sidecar-cpu-request", "10m"),
            memory_request=src.quantity("sidecar-memory-request", "32Mi"),
            memory_limit=src.quantity("sidecar-memory-limit", "64Mi"),
            timing=timing,
        ),
        excluded_namespaces=tuple(dict.fromkeys(excluded)),
        sweep_interval=src.duration("sweep-interval", 60.0, zero_disables=True),
        sweep_margin=src.duration(
            "sweep-margin", defaults.SWEEP_MARGIN, at_least=defaults.MIN_SWEEP_MARGIN
        ),
        auto_rbac=src.boolean("auto-rbac", False),
        log_level=level,
        kubeconfig=src.raw("kubeconfig") or None,
    )


def check_files(settings: InjectorSettings) -> None:
    """The TLS files exist and are readable (a missing Secret mount is a config error)."""
    for flag, path in (
        ("tls-cert-file", settings.tls_cert_file),
        ("tls-key-file", settings.tls_key_file),
    ):
        try:
            with path.open("rb") as fh:
                fh.read(1)
        except OSError as err:
            raise SettingsError(
                f"--{flag}={str(path)!r}: cannot read it ({err.strerror}); mount the serving "
                "certificate Secret there, or pass the PEM files' paths"
            ) from None
