"""``grelmicro-sidecar run|lock|injector|status|cleanup``: argv in, exit code out (contract §7).

Each command is imported only when it runs: ``injector`` (kopf) above all, which ``run``
never pays for.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping

from .. import __version__
from ..core.defaults import PROG
from ..kit import held_signals
from ..kit.options import SIDECAR_ENV, Parser, SettingsError, Source, add_settings, env_note
from .settings import COMMANDS


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command but ``injector``, from their tables (``settings``)."""
    parser = Parser(prog=PROG, description="Kubernetes leader election over Leases, as a sidecar.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for name, (help_, about, table) in COMMANDS.items():
        p = sub.add_parser(name, help=help_, description=f"{about} {env_note(SIDECAR_ENV)}".strip())
        add_settings(p, table)
        if name == "lock":
            p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD [ARG ...]")
    sub.add_parser(
        "injector", help="run the admission webhook that injects the sidecar", add_help=False
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["run"], ["lock"]):
        held_signals.hold()  # a SIGTERM during start-up becomes a graceful exit
    return command(argv, os.environ)


def command(argv: list[str], environ: Mapping[str, str]) -> int:
    """One command, its flags backed by ``environ``: a bad setting is exit 2 and one line."""
    if argv[:1] == ["injector"]:
        from ..injector.main import main as injector_main  # kopf is only imported here

        return injector_main(argv[1:], environ)
    try:
        args = build_parser().parse_args(argv)
        src = Source(args, SIDECAR_ENV, environ)
        if args.command in ("run", "lock"):
            from .run import lock, run

            return run(src) if args.command == "run" else lock(src)
        from .leases import cleanup, status

        return status(src) if args.command == "status" else cleanup(src)
    except SettingsError as err:  # a UsageError too, which names the program already
        print(str(err) if str(err).startswith(PROG) else f"{PROG}: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def kubectl_plugin() -> int:
    """``kubectl grelmicro status|cleanup ...``: kubectl finds ``kubectl-grelmicro`` on PATH."""
    if sys.argv[1:2] not in (["status"], ["cleanup"], ["-h"], ["--help"]):
        print("usage: kubectl grelmicro status|cleanup [flags] (see --help)", file=sys.stderr)
        return 2
    return main(sys.argv[1:])


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
