"""The settings toolkit of every command: each setting declared once, its flag, env and help.

A ``Setting`` is one row of a command's table; ``add_settings`` makes its flag, ``Source.get``
reads it: the flag, else ``GRELMICRO_SIDECAR_<FLAG>`` / ``GRELMICRO_INJECTOR_<FLAG>``, else
the default. A wrong value is a ``SettingsError``: one line naming the flag or env variable,
the value and what is accepted (contract §7). ``run`` never loads ``shutil`` through here.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, NoReturn, TypeVar

from ..core import defaults
from ..core.durations import format_duration
from ..core.timing import Timing
from . import checks

SIDECAR_ENV, INJECTOR_ENV = "GRELMICRO_SIDECAR_", "GRELMICRO_INJECTOR_"
T = TypeVar("T")


class SettingsError(Exception):
    """A flag or env value is wrong; the message names it and the accepted form."""


class UsageError(SettingsError):
    """The command line itself is wrong (unknown flag, missing argument)."""


@dataclass(frozen=True)
class Setting(Generic[T]):
    """``default``: when neither flag nor env is set ("" is unset but for ``BLANK_REFUSED``
    checks). ``shown``: the default as ``--help`` says it, if the value would not.
    ``required``: an example, no default. ``env``: False for one-shot flags."""

    flag: str
    check: Callable[[str], T]
    default: T
    help: str
    shown: str | None = None
    short: str | None = None
    required: str | None = None
    env: bool = True
    argparse: Mapping[str, Any] = field(default_factory=dict)


#: A command's settings, in the order ``--help`` lists them.
Table = tuple[Setting[Any], ...]


def switch(flag: str, help: str, short: str | None = None) -> Setting[bool]:
    """A flag without a value (``-A``, ``--watch``): on when given."""
    extra = {"action": "store_true"}
    return Setting(flag, checks.boolean, False, help, "", short, env=False, argparse=extra)


# fmt: off
NAMESPACE: Setting[str | None] = Setting(
    "namespace", checks.namespace, None, "namespace of the Leases", short="-n",
    shown="the service account's, then $POD_NAMESPACE, then the kubeconfig context's")
KUBECONFIG: Setting[str | None] = Setting("kubeconfig", str, None, "kubeconfig file",
    "$KUBECONFIG, then ~/.kube/config, then the pod's service account")
LOG_LEVEL = Setting("log-level", checks.log_level, "info",
    "least severe level logged: " + ", ".join(defaults.LOG_LEVELS))
LEASE_DURATION = Setting("lease-duration", checks.duration, defaults.LEASE_DURATION,
    "how long followers wait, after the last renewal, before taking over: longer is a slower "
    "failover after a crash, shorter is more sensitive to API server hiccups")
RENEW_DEADLINE = Setting("renew-deadline", checks.duration, defaults.RENEW_DEADLINE,
    "the leader steps down if it has not renewed within this; less than --lease-duration")
RETRY_PERIOD = Setting("retry-period", checks.duration, defaults.RETRY_PERIOD,
    "interval of acquire and renew attempts; shorter is more API server load in an outage")
MARGIN = Setting("margin", checks.sweep_margin, defaults.SWEEP_MARGIN,
    f"how long past expiry a Lease must be to be deleted; at least {defaults.MIN_SWEEP_MARGIN:g}s,"
    " for the sweeper's own pauses")
# fmt: on
TIMING: Table = (LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD)
CONNECTION: Table = (NAMESPACE, KUBECONFIG, LOG_LEVEL)


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line, not usage + error, and tells its help
    formatter the width ($COLUMNS, the terminal's, 80): argparse's own search for it imports
    ``shutil`` (with zlib, bz2 and lzma) into every ``run`` of every pod."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(formatter_class=self._formatter, **kwargs)

    @staticmethod
    def _formatter(prog: str) -> argparse.HelpFormatter:
        columns = 80
        with contextlib.suppress(ValueError, OSError):
            columns = int(os.environ.get("COLUMNS") or 0) or os.get_terminal_size().columns or 80
        return argparse.HelpFormatter(prog, width=columns - 2)  # - 2: as argparse's own

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see --help)")


def add_settings(parser: argparse.ArgumentParser, table: Iterable[Setting[Any]]) -> None:
    """The flags of a table, None unless given (so ``Source`` can tell the env variable's turn;
    a switch's False says the same), each help ending with the default: 15s, false, 4040."""
    for s in table:
        value, shown = s.default, s.shown
        if shown is None:
            shown = format_duration(value) if isinstance(value, float) else str(value)
            shown = shown.lower() if isinstance(value, bool) else "" if value is None else shown
        shown = "required" if s.required is not None else shown and f"default: {shown}"
        text = f"{s.help} ({shown})" if shown else s.help
        parser.add_argument(*filter(None, (s.short, f"--{s.flag}")), help=text, **s.argparse)


def env_name(prefix: str, flag: str) -> str:
    return prefix + flag.upper().replace("-", "_")


def env_note(prefix: str) -> str:
    note = "Each flag can also be set by env {}<FLAG> (upper case, '-' -> '_'); the flag wins."
    return note.format(prefix)


class Source:
    """The parsed flags of one command, backed by its env variables."""

    def __init__(self, args: Any, prefix: str, environ: Mapping[str, str] | None = None) -> None:
        self.args, self.prefix = args, prefix
        self.environ = os.environ if environ is None else environ

    def raw(self, flag: str, env: bool = True) -> str | None:
        """The flag's value, else the env variable's (an empty one is returned as ``""``)."""
        value = getattr(self.args, flag.replace("-", "_"), None)
        from_env = self.environ.get(env_name(self.prefix, flag)) if env else None
        return from_env if value is None else str(value)

    def where(self, flag: str) -> str:
        return f"--{flag}" if self.raw(flag, env=False) is not None else env_name(self.prefix, flag)

    def get(self, setting: Setting[T]) -> T:
        flag, raw = setting.flag, self.raw(setting.flag, setting.env)
        if raw is None or (raw == "" and setting.check not in checks.BLANK_REFUSED):
            if setting.required is None:
                return setting.default
            raise SettingsError(
                f"--{flag} is required (or {env_name(self.prefix, flag)}): {setting.help}, "
                f"e.g. --{flag}={setting.required}"
            )
        try:
            return setting.check(raw)
        except checks.Invalid as err:
            reason = err.reason or f"={raw!r} is not valid; expected {err.accepted}"
            raise SettingsError(self.where(flag) + reason) from None

    def timing(self) -> Timing:
        """The durations, checked by every rule of contract §3, named as given or as defaults."""

        def describe(flag: str, seconds: float) -> str:  # a blank value was refused by get
            d = format_duration(seconds)
            return f"{self.where(flag)}={d}" if self.raw(flag) else f"{flag} {d} (the default)"

        timing = Timing(*(self.get(s) for s in TIMING))
        if problems := timing.problems(describe):
            raise SettingsError(problems[0])
        return timing
