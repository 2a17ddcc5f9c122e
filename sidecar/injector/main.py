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
from collections.abc import Mapping
from pathlib import Path

from ..core import defaults
from ..kit.logs import Logger
from ..kit.options import INJECTOR_ENV, SettingsError, Source
from ..kube.config import ConfigError, load
from . import settings as flags
from .webhookconfig import ca_bundle_of, webhook_configuration

PROG = f"{defaults.PROG} injector"


def _print_webhook_config(args: argparse.Namespace) -> int:
    src = Source(args, INJECTOR_ENV, environ={})  # its flags only: no env variables here
    ca_file = src.get(flags.CA_FILE)
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
    url, name = src.get(flags.WEBHOOK_URL), src.get(flags.SERVICE_NAME)
    namespace = src.get(flags.SERVICE_NAMESPACE)
    chosen = src.get(flags.EXCLUDED_NAMESPACES)
    if not url and not (name and namespace):
        raise SettingsError(
            "--print-webhook-config needs --webhook-url, or --service-name and --service-namespace"
        )
    port = None if url else src.get(flags.SERVICE_PORT)
    service = None if url else {"namespace": namespace, "name": name, "port": port}
    config = webhook_configuration(
        ca_bundle_of(ca),
        url=url or None,
        service=service,
        excluded_namespaces=["kube-system", namespace or ""] if chosen is None else chosen,
    )
    print(json.dumps(config, indent=2))
    return 0


def main(argv: list[str], environ: Mapping[str, str] | None = None) -> int:
    try:
        args = flags.build_parser().parse_args(argv)
        if args.print_webhook_config:
            return _print_webhook_config(args)
        settings = flags.injector_settings(args, environ)
        flags.check_files(settings)
        # One connection for the injector's calls and kopf's login (a plugin runs once).
        config = load(settings.kubeconfig, plugins=True)
        if config.impersonation:
            raise ConfigError(
                f"{config.source}: impersonation (as) is not supported by the injector "
                "(kopf's login cannot send it); use a kubeconfig without it"
            )
    except SystemExit as exit_:  # --help
        return int(exit_.code or 0)
    except (ConfigError, SettingsError) as err:  # a UsageError too, already prefixed
        print(str(err) if str(err).startswith(PROG) else f"{PROG}: {err}", file=sys.stderr)
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
