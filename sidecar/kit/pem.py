"""Loading a PEM certificate chain and key held in memory into an ``ssl`` context.

``ssl`` reads paths only: PEM bytes go through an anonymous in-memory file
(memfd), so a private key never touches a disk and ``tempfile`` (with shutil,
bz2, lzma, zlib) stays unloaded; a private temporary file, removed once loaded,
where there is no memfd (not Linux). Used for a kubeconfig's inline client
certificate and for the injector's own serving certificate.
"""

from __future__ import annotations

import contextlib
import os
import ssl
from pathlib import Path


def load_chain(context: ssl.SSLContext, cert: str | bytes, key: str | bytes) -> None:
    """``context.load_cert_chain`` for a path (str) or PEM bytes of each; raises ``ssl.SSLError``
    (an ``OSError``) when they do not load."""
    with contextlib.ExitStack() as opened:

        def path(data: str | bytes) -> str:
            if isinstance(data, str):
                return data
            if hasattr(os, "memfd_create"):
                fd = os.memfd_create("grelmicro-pem", os.MFD_CLOEXEC)
                name = f"/proc/self/fd/{fd}"
            else:
                import tempfile

                fd, name = tempfile.mkstemp(prefix="grelmicro-", suffix=".pem")
                opened.callback(Path(name).unlink, missing_ok=True)
            opened.callback(os.close, fd)
            with open(fd, "wb", closefd=False) as fh:
                fh.write(data)
            return name

        context.load_cert_chain(path(cert), path(key))
