"""The settings of ``grelmicro-sidecar injector``: declared once, checked before anything starts.

The table ``INJECTOR`` (``kit.options``) gives the parser, ``--help`` and the
``GRELMICRO_INJECTOR_<FLAG>`` env variables (the flag wins; none for
``--print-webhook-config`` and its flags). The sidecar's defaults are
``SidecarSpec``'s. A problem is one line naming the flag and the accepted form.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from ..core import defaults
from ..kit import checks, options
from ..kit.options import INJECTOR_ENV, Setting, SettingsError
from .patch import SidecarSpec

DEFAULT_TLS_DIR = "/etc/grelmicro-sidecar/tls"
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
_SPEC = SidecarSpec(image="")  # the sidecar's defaults, from the one place that states them
_IMAGE = "ghcr.io/grelinfo/grelmicro-sidecar:0.1.0"
YEAR = 365 * 24 * 3600.0
env_name = partial(options.env_name, INJECTOR_ENV)


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
    #: The injector's own certificate (``servingcert.OwnCertificate``): its Secret, or None
    #: to serve ``tls_cert_file`` and ``tls_key_file``.
    tls_secret: tuple[str, str] | None = None
    webhook_config: str = ""
    cert_hosts: tuple[str, ...] = ()
    ca_validity: float = 10 * YEAR
    cert_validity: float = YEAR
    drain_delay: float = 10.0
    check_lease_access: bool = True
    lease_cluster_role: str = ""


def _print_mode(flag: str, help: str) -> Setting[str | None]:
    """A flag of --print-webhook-config (no env variable: a one-shot mode)."""
    return Setting(flag, str, None, "(with --print-webhook-config) " + help, "", env=False)


# fmt: off
HOST = Setting(
    "host", checks.no_spaces("an address to listen on, such as 0.0.0.0 or 127.0.0.1"), "0.0.0.0",
    "address of the HTTPS webhook listener")
PORT = Setting("port", checks.port, 8443, "HTTPS webhook port; the webhook path is /inject")
TLS_CERT_FILE = Setting(
    "tls-cert-file", str, f"{DEFAULT_TLS_DIR}/tls.crt", "serving certificate, PEM")
TLS_KEY_FILE = Setting("tls-key-file", str, f"{DEFAULT_TLS_DIR}/tls.key", "serving key, PEM")
HEALTH_PORT = Setting(
    "health-port", checks.port, 8080, "plain HTTP port for GET /healthz and /metrics")
SIDECAR_IMAGE = Setting(
    "sidecar-image", checks.no_spaces("an image reference such as " + _IMAGE), "",
    "the image of the injected sidecar", required=_IMAGE)
PULL_POLICY = Setting(
    "sidecar-image-pull-policy", checks.one_of(PULL_POLICIES), _SPEC.pull_policy,
    ", ".join(PULL_POLICIES))
CPU_REQUEST = Setting(
    "sidecar-cpu-request", checks.quantity, _SPEC.cpu_request, "CPU request of the sidecar")
MEMORY_REQUEST = Setting(
    "sidecar-memory-request", checks.quantity, _SPEC.memory_request, "memory request of the sidecar")
MEMORY_LIMIT = Setting(
    "sidecar-memory-limit", checks.quantity, _SPEC.memory_limit, "memory limit of the sidecar")
EXCLUDED_NAMESPACES: Setting[tuple[str, ...] | None] = Setting(
    "excluded-namespaces", checks.namespaces, None, "comma-separated namespaces never injected",
    "kube-system and $POD_NAMESPACE")
SWEEP_INTERVAL = Setting(
    "sweep-interval", checks.duration_or_zero, 60.0,
    "period of the expired-Lease sweep; 0 disables it")
SWEEP_MARGIN = replace(options.MARGIN, flag="sweep-margin")
TLS_SECRET: Setting[tuple[str, str] | None] = Setting(
    "tls-secret", checks.object_ref, None,
    "<namespace>/<name>: keep the injector's own CA and serving certificate in this Secret and "
    "the CA bundle in --webhook-config, renewing both before they end; unset: serve "
    "--tls-cert-file and --tls-key-file")
WEBHOOK_CONFIG = Setting(
    "webhook-config", str, "", "(with --tls-secret) the MutatingWebhookConfiguration whose "
    "webhooks get the CA bundle")
CERT_HOSTS: Setting[tuple[str, ...] | None] = Setting(
    "cert-hosts", checks.hosts, None, "(with --tls-secret) the DNS names and addresses the "
    "serving certificate names: those the API server dials", "none")
CA_VALIDITY = Setting(
    "ca-validity", checks.lifetime, 10 * YEAR, "(with --tls-secret) how long a CA lives; a new "
    "one joins the bundle in its last third")
CERT_VALIDITY = Setting(
    "cert-validity", checks.lifetime, YEAR, "(with --tls-secret) how long a serving certificate "
    "lives; a new one is issued in its last third")
DRAIN_DELAY = Setting(
    "drain-delay", checks.duration_or_zero, 10.0, "after SIGTERM: not ready, and what still "
    "arrives answered this long, each connection closed after its answer, while the pod leaves "
    "the Service; then stop")
CHECK_LEASE_ACCESS = Setting(
    "check-lease-access", checks.boolean, True, "refuse a pod whose ServiceAccount may not use "
    "Leases in its namespace (a SubjectAccessReview), naming the fix; not with --auto-rbac")
LEASE_CLUSTER_ROLE = Setting(
    "lease-cluster-role", str, "", "the ClusterRole of the sidecar's Lease permissions, which "
    "that refusal tells to bind", "none: the refusal points to manifests/rbac.yaml")
AUTO_RBAC = Setting(
    "auto-rbac", checks.boolean, False,
    "true: ensure a Role and RoleBinding on leases for the ServiceAccount of each injected pod")
PRINT_WEBHOOK_CONFIG = options.switch(
    "print-webhook-config", "print the MutatingWebhookConfiguration as JSON and exit; needs "
    "--ca-file and --webhook-url or --service-name/--service-namespace")
CA_FILE = _print_mode("ca-file", "PEM CA of the serving certificate")
WEBHOOK_URL = _print_mode("webhook-url", "e.g. https://127.0.0.1:8443/inject")
SERVICE_NAME = _print_mode("service-name", "the injector's Service")
SERVICE_NAMESPACE = _print_mode("service-namespace", "the Service's namespace")
SERVICE_PORT = Setting(
    "service-port", checks.port, 443, "(with --print-webhook-config) the Service's port",
    env=False)
INJECTOR: options.Table = (
    HOST, PORT, TLS_CERT_FILE, TLS_KEY_FILE, HEALTH_PORT, SIDECAR_IMAGE, PULL_POLICY,
    CPU_REQUEST, MEMORY_REQUEST, MEMORY_LIMIT,
    *(replace(s, help=f"{s.help}; for pods without the annotation") for s in options.TIMING),
    EXCLUDED_NAMESPACES, SWEEP_INTERVAL, SWEEP_MARGIN, AUTO_RBAC, TLS_SECRET, WEBHOOK_CONFIG,
    CERT_HOSTS, CA_VALIDITY, CERT_VALIDITY, DRAIN_DELAY, CHECK_LEASE_ACCESS, LEASE_CLUSTER_ROLE,
    options.LOG_LEVEL,
    options.KUBECONFIG,
    PRINT_WEBHOOK_CONFIG, CA_FILE, WEBHOOK_URL, SERVICE_NAME, SERVICE_NAMESPACE, SERVICE_PORT,
)
# fmt: on


def build_parser() -> argparse.ArgumentParser:
    parser = options.Parser(
        prog=f"{defaults.PROG} injector",
        description="Admission webhook that injects the leader-election sidecar into pods "
        'annotated leader-election.grelmicro.io/inject: "true". ' + options.env_note(INJECTOR_ENV),
    )
    options.add_settings(parser, INJECTOR)
    return parser


def injector_settings(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> InjectorSettings:
    src = options.Source(args, INJECTOR_ENV, environ)
    image, policy, timing = src.get(SIDECAR_IMAGE), src.get(PULL_POLICY), src.timing()
    excluded = src.get(EXCLUDED_NAMESPACES)
    if excluded is None:
        own = src.environ.get("POD_NAMESPACE")
        excluded = ("kube-system", own) if own and own != "kube-system" else ("kube-system",)
    level = src.get(options.LOG_LEVEL)
    tls_secret, cert_hosts = src.get(TLS_SECRET), src.get(CERT_HOSTS)
    webhook_config = src.get(WEBHOOK_CONFIG)
    ca_validity, cert_validity = src.get(CA_VALIDITY), src.get(CERT_VALIDITY)
    if tls_secret and not (cert_hosts and webhook_config):
        raise SettingsError(
            "--tls-secret needs --cert-hosts (the names the API server dials, such as "
            "<service>.<namespace>.svc) and --webhook-config (the MutatingWebhookConfiguration)"
        )
    if cert_validity > ca_validity:
        raise SettingsError(
            "--cert-validity must not be longer than --ca-validity (a certificate ends with its CA)"
        )
    return InjectorSettings(
        host=src.get(HOST),
        port=src.get(PORT),
        tls_cert_file=Path(src.get(TLS_CERT_FILE)),
        tls_key_file=Path(src.get(TLS_KEY_FILE)),
        health_port=src.get(HEALTH_PORT),
        sidecar=SidecarSpec(
            image,
            policy,
            cpu_request=src.get(CPU_REQUEST),
            memory_request=src.get(MEMORY_REQUEST),
            memory_limit=src.get(MEMORY_LIMIT),
            timing=timing,
        ),
        excluded_namespaces=excluded,
        sweep_interval=src.get(SWEEP_INTERVAL),
        sweep_margin=src.get(SWEEP_MARGIN),
        auto_rbac=src.get(AUTO_RBAC),
        log_level=level,
        kubeconfig=src.get(options.KUBECONFIG),
        tls_secret=tls_secret,
        webhook_config=webhook_config,
        cert_hosts=cert_hosts or (),
        ca_validity=ca_validity,
        cert_validity=cert_validity,
        drain_delay=src.get(DRAIN_DELAY),
        check_lease_access=src.get(CHECK_LEASE_ACCESS),
        lease_cluster_role=src.get(LEASE_CLUSTER_ROLE),
    )


def check_files(settings: InjectorSettings) -> None:
    """The TLS files exist and are readable (a missing Secret mount is a config error); with
    --tls-secret the injector makes its own and reads no file."""
    if settings.tls_secret:
        return
    for flag in ("tls-cert-file", "tls-key-file"):
        path = getattr(settings, flag.replace("-", "_"))
        try:
            with path.open("rb") as fh:
                fh.read(1)
        except OSError as err:
            raise SettingsError(
                f"--{flag}={str(path)!r}: cannot read it ({err.strerror}); mount the serving "
                "certificate Secret there, or pass the PEM files' paths"
            ) from None
