"""The checks a setting's value goes through, stated once for flags, env variables and annotations.

Each turns the text a user wrote into its value, or raises ``Invalid`` saying what would be
accepted (the words after "expected"); the caller names where the text came from. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import partial
from typing import TypeVar

from ..core import defaults
from ..core.durations import ACCEPTED_FORM, format_duration, parse_duration
from ..core.shards import MAX_SHARDS

T = TypeVar("T")

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_QUANTITY = re.compile(r"\d+(\.\d+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?")
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")
_count = re.compile(r"[1-9][0-9]?|100").fullmatch  # ASCII only: "¹" is a digit int() refuses


class Invalid(ValueError):
    """The text is refused. ``accepted``: what would be; or ``reason``, a better sentence than
    "is not valid", said right after the setting's name."""

    def __init__(self, accepted: str = "", *, reason: str = "") -> None:
        super().__init__(reason or accepted)
        self.accepted, self.reason = accepted, reason


def duration(raw: str, *, zero_disables: bool = False, at_least: float = 0.0) -> float:
    """Seconds, from a Go-style duration greater than 0 and at most a day (contract §3)."""
    if zero_disables and raw.strip() in ("0", "0s"):
        return 0.0
    disable = ", or 0 to disable" if zero_disables else ""
    try:
        value = parse_duration(raw)
    except ValueError:
        raise Invalid(ACCEPTED_FORM + disable) from None
    if value <= 0:
        raise Invalid("a duration greater than 0, such as 15s" + disable)
    if value > defaults.MAX_DURATION:
        raise Invalid(f"a duration of at most {format_duration(defaults.MAX_DURATION)}")
    if value < at_least:
        raise Invalid(f"a duration of at least {format_duration(at_least)}" + disable)
    return value


def lifetime(raw: str) -> float:
    """Seconds, from a Go-style duration of at least a minute and no upper bound (a
    certificate's validity: 8760h is a year)."""
    try:
        value = parse_duration(raw)
    except ValueError:
        raise Invalid("a duration of at least 1m, such as 8760h (a year)") from None
    if value < 60:
        raise Invalid("a duration of at least 1m, such as 8760h (a year)")
    return value


def port(raw: str, *, zero_disables: bool = False) -> int:
    disable = ", or 0 to disable HTTP" if zero_disables else ""
    if not (raw.isascii() and raw.isdigit() and (0 if zero_disables else 1) <= int(raw) <= 65535):
        raise Invalid("a port number from 1 to 65535" + disable)
    return int(raw)


duration_or_zero = partial(duration, zero_disables=True)
port_or_zero = partial(port, zero_disables=True)
#: How long past expiry a Lease must be to be swept: it covers the sweeper's own pauses.
sweep_margin = partial(duration, at_least=defaults.MIN_SWEEP_MARGIN)


def _rule(
    accepted: str, ok: Callable[[str], object], value: Callable[[str], T]
) -> Callable[[str], T]:
    """A check: ``value(text)`` when ``ok(text)``, else ``Invalid(accepted)``."""

    def check(raw: str) -> T:
        if not ok(raw):
            raise Invalid(accepted)
        return value(raw)

    return check


def one_of(choices: Sequence[str]) -> Callable[[str], str]:
    return _rule("one of " + ", ".join(choices), choices.__contains__, str)


#: A count of 1 to 100 (a probe's failures or successes in a row).
count = _rule("a whole number from 1 to 100", lambda w: _count(w) is not None, int)
#: An election's shards (contract §2, shards): each is a Lease and a watch in every pod.
shards = _rule(
    f"a whole number from 1 to {MAX_SHARDS} (each shard is a Lease)",
    lambda w: w.isascii() and w.isdigit() and 1 <= int(w) <= MAX_SHARDS,
    int,
)


def loopback_url(raw: str) -> str:
    """An http:// URL on this pod's loopback (the app's health endpoint)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(raw.strip())
        parts.port  # noqa: B018 (a bad port raises here)
    except ValueError:
        parts = None
    if parts is None or parts.scheme != "http" or parts.hostname not in LOOPBACK:
        raise Invalid("an http:// URL on loopback, such as http://127.0.0.1:8080/healthz")
    return raw.strip()


LOOPBACK = ("127.0.0.1", "localhost", "::1")


def log_level(raw: str) -> str:
    return one_of(defaults.LOG_LEVELS)(raw.lower())


def no_spaces(example: str) -> Callable[[str], str]:
    """A word without blanks (an address, an image reference), surrounding blanks removed."""
    word = _rule(example, lambda w: w and not any(ch.isspace() for ch in w), str)
    return lambda raw: word(raw.strip())


#: A flag's or env variable's yes or no, in any of the usual spellings.
boolean = _rule(
    "true or false", lambda r: r.lower() in _TRUE + _FALSE, lambda r: r.lower() in _TRUE
)
#: An annotation's yes or no: the YAML strings "true" and "false", nothing else.
exact_boolean = _rule('"true" or "false"', ("true", "false").__contains__, "true".__eq__)
quantity = _rule("a Kubernetes quantity such as 10m, 0.5, 32Mi or 1Gi", _QUANTITY.fullmatch, str)
#: A DNS-1123 label, what the API server accepts as a namespace's name.
namespace = _rule(
    "a namespace name: lowercase letters, digits and '-', starting and ending with a letter or "
    "digit, at most 63 chars",
    DNS_LABEL.fullmatch,
    str,
)


_HOST = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?|[0-9.]+|[0-9a-fA-F:]*:[0-9a-fA-F:.]*")


def hosts(raw: str) -> tuple[str, ...]:
    """A comma-separated list of DNS names and IP addresses, each once."""
    names = [n.strip() for n in raw.split(",") if n.strip()]
    if not names or not all(_HOST.fullmatch(n) for n in names):
        raise Invalid(
            "a comma-separated list of DNS names or IP addresses, e.g. svc.ns.svc,10.0.0.1"
        )
    return tuple(dict.fromkeys(names))


def object_ref(raw: str) -> tuple[str, str]:
    """``<namespace>/<name>``: an object in a namespace."""
    namespace_, _, name = raw.strip().partition("/")
    if not (DNS_LABEL.fullmatch(namespace_) and name and "/" not in name):
        raise Invalid("<namespace>/<name>, such as grelmicro-system/grelmicro-sidecar-tls")
    return namespace_, name


def namespaces(raw: str) -> tuple[str, ...]:
    """A comma-separated list of namespace names, each once; blanks between commas are skipped."""
    names = [n.strip() for n in raw.split(",") if n.strip()]
    if not all(DNS_LABEL.fullmatch(n) for n in names):
        raise Invalid("a comma-separated list of namespace names, e.g. kube-system,ops")
    return tuple(dict.fromkeys(names))


#: The checks of numbers, durations, yes-or-no and lists: an empty value is refused by them,
#: where for a name or a path it counts as unset (a manifest's ``value: ""``).
BLANK_REFUSED: frozenset[Callable[[str], object]] = frozenset(
    {
        duration,
        duration_or_zero,
        sweep_margin,
        lifetime,
        port,
        port_or_zero,
        boolean,
        quantity,
        namespaces,
    }
)
