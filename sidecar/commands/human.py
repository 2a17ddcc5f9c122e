"""How ``status`` and ``cleanup`` reach the Leases: kubectl's kubeconfig when it can, else ours."""

from __future__ import annotations

from typing import Protocol

from ..driver.sweep import Leases
from ..kit.options import Source
from ..kube.config import ConfigError, load
from ..kube.leases import LeaseStore
from ..kube.namespace import pick_namespace, resolve_namespace


class HumanStore(Leases, Protocol):
    """What ``status`` and ``cleanup`` do with Leases: a sweep's list and delete, then close."""

    def close(self) -> None: ...


def human_store(src: Source, all_namespaces: bool = False) -> tuple[HumanStore, str]:
    """The Leases of ``status``/``cleanup`` and their namespace; ConfigError when unusable.

    ``all_namespaces``: the store lists every namespace (``status -A``).

    With the official client installed, kubectl's kubeconfig semantics
    (``kube.kubectl``); without it, the built-in loader, which refuses what it
    does not implement.
    """
    from ..kube import kubectl

    context, as_user = src.raw("context") or None, src.raw("as") or None
    groups = tuple(getattr(src.args, "as_group", None) or ())
    explicit = src.raw("kubeconfig") or None
    if kubectl.available():
        target = kubectl.connect(explicit, context, as_user, groups)
        namespace = pick_namespace(src.namespace(), target.namespace, target.in_cluster)
        return kubectl.OfficialLeases(target, "" if all_namespaces else namespace), namespace
    if context or as_user or groups:
        flag = "--context" if context else "--as"
        raise ConfigError(f"{flag} needs the official client: {kubectl.INSTALL_HINT}")
    config = load(explicit)
    namespace = resolve_namespace(src.namespace(), config)
    return LeaseStore(config, "" if all_namespaces else namespace), namespace
