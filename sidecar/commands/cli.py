"""``grelmicro-sidecar run|lock|injector|status|cleanup``.

Exit codes (contract §7): 0 ok, 2 bad configuration or usage (one line on stderr,
no traceback), 1 runtime failure. ``injector`` imports kopf lazily, so ``run``
never pays for it.
"""

from __future__ import annotations

import argparse
import sys

from .. import __version__
from ..core import defaults
from ..core.defaults import PROG
from ..kit import held_signals
from ..kit.options import SIDECAR_ENV, Parser, SettingsError, env_name


def _add_connection(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-n",
        "--namespace",
        help="namespace of the Leases (default: the service account's, "
        "then $POD_NAMESPACE, then the kubeconfig context's)",
    )
    p.add_argument(
        "--kubeconfig",
        help="kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, "
        "then the pod's service account)",
    )
    p.add_argument("--log-level", help="debug, info, warning or error (default info)")


def _add_election(
    p: argparse.ArgumentParser, port_default: str, state_default: str, identity_suffix: str = ""
) -> None:
    """The flags of ``run`` and ``lock``: the election, its timings, where to publish."""
    p.add_argument("--election", help="election name; the Lease is leader-<name>")
    p.add_argument(
        "--identity",
        help=f"candidate identity (default: $POD_NAME, then the hostname{identity_suffix})",
    )
    p.add_argument(
        "--lease-duration", help="how long followers wait before taking over (default 15s)"
    )
    p.add_argument(
        "--renew-deadline", help="leader steps down if not renewed within this (default 10s)"
    )
    p.add_argument("--retry-period", help="retry interval for failed acquire/renew (default 2s)")
    p.add_argument("--state-dir", help=f"where state.json is written (default {state_default})")
    p.add_argument(
        "--port",
        help=f"HTTP port for /leader, /status, /events, /healthz, /metrics "
        f"(default {port_default}; 0 disables)",
    )
    _add_connection(p)


def _add_kubectl_flags(p: argparse.ArgumentParser) -> None:
    """kubectl's own flags for the human-facing commands."""
    p.add_argument("--context", help="the kubeconfig context to use (default: its current one)")
    p.add_argument("--as", metavar="USER", help="impersonate this user")
    p.add_argument(
        "--as-group", action="append", metavar="GROUP", help="impersonate this group (repeatable)"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog=PROG, description="Kubernetes leader election over Leases, as a sidecar.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    run = sub.add_parser(
        "run",
        help="take part in an election and publish the result",
        description="Each flag can also be set by env "
        f"{env_name(SIDECAR_ENV, '<flag>')} (upper case, '-' -> '_').",
    )
    _add_election(run, port_default=str(defaults.PORT), state_default=defaults.STATE_DIR)
    run.add_argument(
        "--label-leader",
        nargs="?",
        const="true",
        metavar="BOOL",
        help=f"label this pod ($POD_NAME) {defaults.LEADER_LABEL}={defaults.LEADER_LABEL_VALUE} "
        "while it leads, for a Service that selects the leader (default false)",
    )

    lock = sub.add_parser(
        "lock",
        help="run a command only while this process leads",
        description="Take part in an election; while this process leads, run CMD with "
        "LEADER_ELECTION_FENCING_TOKEN and LEADER_ELECTION_STATE_FILE in its environment. "
        "It gets SIGTERM --kill-grace before its leadership could lapse and SIGKILL at it. "
        "Exit: the command's code; 75 when leadership was lost under it; 2 bad usage.",
    )
    _add_election(
        lock,
        port_default="0: none",
        state_default="a temporary directory",
        identity_suffix=", then -<pid>",
    )
    lock.add_argument(
        "--kill-grace",
        help="SIGTERM this long before valid_until, SIGKILL at it "
        "(default: a quarter of the renew deadline, at most 5s)",
    )
    lock.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD [ARG ...]")

    status = sub.add_parser("status", help="show the managed Leases of a namespace")
    _add_connection(status)
    _add_kubectl_flags(status)
    status.add_argument(
        "--output", "-o", choices=("table", "wide", "json", "yaml"), default="table"
    )
    status.add_argument(
        "-A", "--all-namespaces", action="store_true", help="the managed Leases of every namespace"
    )
    status.add_argument(
        "-w", "--watch", action="store_true", help="then print each change, like kubectl get -w"
    )

    clean = sub.add_parser("cleanup", help="delete expired managed Leases of a namespace, once")
    _add_kubectl_flags(clean)
    _add_connection(clean)
    clean.add_argument("--margin", help="how long past expiry a Lease must be (default 60s)")

    sub.add_parser(
        "injector", help="run the admission webhook that injects the sidecar", add_help=False
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["run"], ["lock"]):
        held_signals.hold()  # a SIGTERM during start-up becomes a graceful exit
    if argv[:1] == ["injector"]:
        from ..injector.main import main as injector_main  # kopf is only imported here

        return injector_main(argv[1:])
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command == "run":
            from .run import run

            return run(args)
        if args.command == "lock":
            from .run import lock

            return lock(args)
        if args.command == "status":
            from .status import status

            return status(args)
        if args.command == "cleanup":
            from .run import cleanup

            return cleanup(args)
    except SettingsError as err:  # a UsageError too
        print(f"{PROG}: {err}" if not str(err).startswith(PROG) else str(err), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    parser.print_usage(sys.stderr)
    return 2


def kubectl_plugin() -> int:
    """``kubectl grelmicro status|cleanup ...``: kubectl finds ``kubectl-grelmicro`` on PATH."""
    argv = sys.argv[1:]
    if argv[:1] not in (["status"], ["cleanup"], ["-h"], ["--help"]):
        print("usage: kubectl grelmicro status|cleanup [flags] (see --help)", file=sys.stderr)
        return 2
    return main(argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
