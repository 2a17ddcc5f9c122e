"""A process stuck in the kernel, which SIGKILL does not end: what ``lock`` must not release under.

``StuckMount`` runs this file as root under ``unshare --mount --propagation
private`` (nothing outside sees the mount): it serves a FUSE file system that
answers the kernel's INIT and never anything else, printing the opcode of
each request it reads. A process that looks up a name there
(``StuckMount.command``) waits for an answer; once its request has been read
(printed), the kernel waits it out uninterruptibly, SIGKILL included
(``request_wait_answer`` in fs/fuse/dev.c): the process runs on, in state D,
as one stuck on a dead NFS server does. Ending the server aborts the
connection, and the stuck process dies of the SIGKILL it has pending. Test
support only.
"""

from __future__ import annotations

import ctypes
import os
import select
import struct
import subprocess
import sys
import time
from pathlib import Path

#: fuse_in_header: len, opcode, unique, nodeid, uid, gid, pid, total_extlen, padding
IN_HEADER = struct.Struct("<IIQQIIIHH")
#: fuse_out_header: len, error, unique
OUT_HEADER = struct.Struct("<IiQ")
FUSE_LOOKUP, FUSE_INIT = 1, 26
#: fuse_init_out, 64 bytes: major, minor, max_readahead, flags, max_background,
#: congestion_threshold, max_write, time_gran, max_pages, map_alignment, flags2,
#: max_stack_depth, request_timeout, 11 unused
INIT_OUT = struct.Struct("<IIIIHHIIHHIIH22x")
MS_NOSUID, MS_NODEV = 2, 4
READY = "ready"


def serve(mountpoint: Path) -> None:
    fd = os.open("/dev/fuse", os.O_RDWR)
    libc = ctypes.CDLL(None, use_errno=True)
    options = f"fd={fd},rootmode=40000,user_id=0,group_id=0".encode()
    flags = MS_NOSUID | MS_NODEV
    if libc.mount(b"stuck", str(mountpoint).encode(), b"fuse", flags, options) != 0:
        raise OSError(ctypes.get_errno(), f"mount fuse on {mountpoint}")
    print(READY, flush=True)
    while True:
        request = os.read(fd, 1 << 20 | 1 << 12)
        _, opcode, unique, *_ = IN_HEADER.unpack_from(request)
        print(opcode, flush=True)
        if opcode == FUSE_INIT:
            body = INIT_OUT.pack(7, 31, 0, 0, 1, 1, 4096, 1, 1, 0, 0, 0, 0)
            os.write(fd, OUT_HEADER.pack(OUT_HEADER.size + len(body), 0, unique) + body)


class StuckMount:
    """The server, as a child of the test in a mount namespace of its own (a context manager).

    ``command`` gets stuck on its mount; ``until_request`` returns once the
    server has read a request of that opcode (from then on its sender is past
    SIGKILL's reach); leaving the context ends the server, and so the stuck
    process too.
    """

    def __init__(self, directory: Path):
        self.mountpoint = directory / "stuck"
        self.mountpoint.mkdir()
        self.server: subprocess.Popen[str] | None = None

    def __enter__(self) -> StuckMount:
        argv = ["unshare", "--mount", "--propagation", "private"]
        argv += [sys.executable, "-I", "-S", __file__, str(self.mountpoint)]
        self.server = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        self.until(READY, 10.0)
        return self

    def __exit__(self, *_: object) -> None:
        if self.server is not None:
            self.server.kill()
            self.server.wait(10)

    def command(self) -> list[str]:
        """A command that gets stuck on the mount (entered through the server's namespace)."""
        assert self.server is not None
        namespace = f"--mount=/proc/{self.server.pid}/ns/mnt"
        return ["nsenter", namespace, "--", "stat", str(self.mountpoint / "x")]

    def until_request(self, opcode: int, timeout: float) -> None:
        self.until(str(opcode), timeout)

    def until(self, line: str, timeout: float) -> None:
        """Until the server prints ``line``; AssertionError after ``timeout`` seconds."""
        assert self.server is not None and self.server.stdout is not None
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.server.stdout], [], [], max(0.0, left))
            assert ready, f"the FUSE server did not print {line!r} within {timeout}s"
            got = self.server.stdout.readline()
            assert got, "the FUSE server exited"
            if got.strip() == line:
                return


if __name__ == "__main__":
    serve(Path(sys.argv[1]))
