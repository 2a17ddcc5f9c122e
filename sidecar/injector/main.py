"""``grelmicro-sidecar injector [flags]``: settings in, exit code out.

Exit codes as for ``run`` (contract §7): 0 ok, 2 bad configuration or usage (one
line on stderr naming the flag, no traceback), 1 runtime failure. kopf is
imported only once the settings are valid, so ``--help`` and mistakes are fast.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from ..core import defaults
from ..kit.logs import Logger
from ..kit.options import INJECTOR_ENV, Source
from ..kube.config import ConfigError, load
from .settings import SettingsError, UsageError, check_files, injector_settings, parse_args
from .webhookconfig import WEBHOOK_PATH, ca_bundle_of, webhook_configuration

PROG = f"{defaults.PROG} injector"


def _print_webhook_config(args: argparse.Namespace) -> int:
    def get(name: str) -> str | None:
        value = getattr(args, name, None)
        return None if value is None else str(value)

    ca_file = get("ca_file")
    if not ca_file:
        raise SettingsError(
            "--print-webhook-config needs --ca-file (the PEM CA of the serving certificate)"
        )
    try:
        ca = Path(ca_file).read_bytes()
    except OSError as err:
        raise SettingsError(f"--ca-file={ca_file!r}: cannot read it ({err.strerror})") from None
    if b"-----BEGIN CERTIFICATE-----" not in ca:
        raise SettingsError(f"--ca-file={ca_file!r} is not a PEM certificate")
    excluded_raw = get("excluded_namespaces")
    excluded = (
        [n.strip() for n in excluded_raw.split(",") if n.strip()]
        if excluded_raw is not None
        else ["kube-system", get("service_namespace") or ""]
    )
    url, name, namespace = get("webhook_url"), get("service_name"), get("service_namespace")
    if url:
        config = webhook_configuration(ca_bundle_of(ca), url=url, excluded_namespaces=excluded)
    elif name and namespace:
        # The flags of --print-webhook-config only: no env variables here.
        port = Source(args, INJECTOR_ENV, environ={}).port("service-port", 443)
        config = webhook_configuration(
            ca_bundle_of(ca),
            service={
                "namespace": namespace,
                "name": name,
                "port": port,
                "path": WEBHOOK_PATH,
            },
            excluded_namespaces=excluded,
        )
    else:
        raise SettingsError(
            "--print-webhook-config needs --webhook-url, or --service-name and --service-namespace"
        )
    print(json.dumps(config, indent=2))
    return 0


def main(argv: list[str]) -> int:
    try:
        args = parse_args(argv)
        if args.print_webhook_config:
            return _print_webhook_config(args)
        settings = injector_settings(args)
        check_files(settings)
        # One connection for the injector's calls and kopf's login (a plugin runs once).
        config = load(settings.kubeconfig, plugins=True)
        if config.impersonation:
            raise ConfigError(
                f"{config.source}: impersonation (as) is not supported by the injector "
                "(kopf's login cannot send it); use a kubeconfig without it"
            )
    except ConfigError as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return 2
    except SystemExit as exit_:  # --help
        return int(exit_.code or 0)
    except (UsageError, SettingsError) as err:
        print(
            f"{PROG}: {err}"
            if not str(err).startswith("injector:")
            else f"grelmicro-sidecar {err}",
            file=sys.stderr,
        )
        return 2

    from .operator import serve  # kopf is imported here, and only here

    log = Logger(settings.log_level, component="injector")
    try:
        return asyncio.run(serve(settings, config, log))
    except KeyboardInterrupt:
        return 130
    except OSError as err:
        log.error("cannot serve", error=str(err))
        print(f"{PROG}: cannot serve: {err}", file=sys.stderr)
        return 1
