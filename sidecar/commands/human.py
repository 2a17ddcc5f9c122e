"""How ``status`` and ``cleanup`` reach the Leases: ``run``'s loader, with kubectl's flags."""

from __future__ import annotations

from ..kit.options import Source
from ..kube.config import load
from ..kube.leases import LeaseStore
from ..kube.namespace import resolve_namespace


def lease_store(src: Source, all_namespaces: bool = False) -> tuple[LeaseStore, str]:
    """The Leases of ``status``/``cleanup`` and their namespace; ConfigError when unusable.

    The loader of ``run`` with kubectl's flags (``--context``, ``--as``,
    ``--as-group``), and a credential plugin allowed (through the official
    client, when installed). ``all_namespaces``: the store lists every
    namespace (``status -A``).
    """
    config = load(
        src.raw("kubeconfig") or None,
        src.raw("context") or None,
        as_user=src.raw("as") or None,
        as_groups=tuple(getattr(src.args, "as_group", None) or ()),
        plugins=True,
    )
    namespace = resolve_namespace(src.namespace(), config)
    return LeaseStore(config, "" if all_namespaces else namespace), namespace
