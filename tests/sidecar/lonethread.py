"""A process whose main thread called ``pthread_exit`` while another thread runs on.

``python lonethread.py FILE``: starts a thread, then ends the main thread with
``pthread_exit``. /proc then shows the process ``Z``, with an empty command line,
though it runs: the thread writes ``pid <PID>`` to FILE once /proc shows that,
then ``beat <time.time()>`` every 20 ms. SIGTERM is ignored (a Python handler
runs only in the main thread, which is gone): only SIGKILL ends it. Test support.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time


def beat(path: str) -> None:
    with open(f"/proc/{os.getpid()}/stat", "rb") as f:
        while f.read().rpartition(b")")[2].split()[0] != b"Z":  # the main thread still runs
            time.sleep(0.01)
            f.seek(0)
    with open(path, "a", buffering=1) as out:
        out.write(f"pid {os.getpid()}\n")
        while True:
            out.write(f"beat {time.time()!r}\n")
            time.sleep(0.02)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    threading.Thread(target=beat, args=(sys.argv[1],)).start()
    ctypes.CDLL(None).pthread_exit(None)
