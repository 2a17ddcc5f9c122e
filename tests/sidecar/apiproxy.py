"""An HTTP proxy between one sidecar and the API server that can lose chosen answers.

``tests/chaos/proxy.py`` shapes TCP bytes under TLS, so it cannot tell one request
from another. This one speaks plain HTTP to the sidecar (a kubeconfig whose server
is ``http://127.0.0.1:<port>``, as with ``kubectl proxy``) and TLS to the real API
server, forwarding the sidecar's own credentials, so RBAC and admission still
decide. Each request is matched against ``rules`` (first match wins):

- ``refuse``: answered 503 here, never forwarded (the API server is down for it);
- ``lose``: forwarded, applied by the API server, then answered 500 here (an
  answer lost on the way back: the client cannot tell whether it was applied);
- ``hold``: held until ``release_held`` (or the client gives up), then forwarded.

Anything else passes, streamed answers (watches) included. Test support only.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal
from urllib.parse import urlsplit

Action = Literal["pass", "refuse", "lose", "hold"]
LABEL = "leader-election.grelmicro.io/leader"
HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


@dataclass(frozen=True)
class Seen:
    """One request the proxy handled, and what it did with it."""

    method: str
    path: str
    body: Any
    action: Action
    #: The API server's status for a forwarded request (0: not forwarded).
    upstream: int


def lease_write(method: str, path: str, body: Any) -> bool:
    return method in ("POST", "PUT", "PATCH", "DELETE") and "/leases" in path


def label_patch(pod: str, value: str | None) -> Callable[[str, str, Any], bool]:
    """Matches a patch of ``pod`` that sets the leader label to ``value`` (None: removes it)."""

    def match(method: str, path: str, body: Any) -> bool:
        if method != "PATCH" or not path.split("?")[0].endswith(f"/pods/{pod}"):
            return False
        labels = ((body or {}).get("metadata") or {}).get("labels") or {}
        return LABEL in labels and labels[LABEL] == value

    return match


class ApiProxy:
    def __init__(self, server: str, ca_file: str) -> None:
        url = urlsplit(server)
        self.upstream = (url.hostname or "127.0.0.1", url.port or 443)
        self.context = ssl.create_default_context(cafile=ca_file)
        self.rules: list[tuple[Callable[[str, str, Any], bool], Action]] = []
        self.seen: list[Seen] = []
        self.held = threading.Event()  # set: held requests go on
        self.closing = False
        self._lock = threading.Lock()
        self._upstreams: set[http.client.HTTPSConnection] = set()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> ApiProxy:
        self._thread.start()
        return self

    def release_held(self) -> None:
        self.held.set()

    def requests(self, action: Action | None = None) -> list[Seen]:
        with self._lock:
            return [s for s in self.seen if action is None or s.action == action]

    def close(self) -> None:
        self.closing = True
        self.held.set()
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            for conn in self._upstreams:  # unblocks the threads reading a watch
                with contextlib.suppress(OSError):
                    if conn.sock is not None:
                        conn.sock.shutdown(socket.SHUT_RDWR)
                conn.close()

    def _action(self, method: str, path: str, body: Any) -> Action:
        for match, action in self.rules:
            if match(method, path, body):
                return action
        return "pass"

    def _record(self, seen: Seen) -> None:
        with self._lock:
            self.seen.append(seen)

    def _connect(self) -> http.client.HTTPSConnection:
        conn = http.client.HTTPSConnection(*self.upstream, context=self.context, timeout=60)
        with self._lock:
            self._upstreams.add(conn)
        return conn

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            upstream: http.client.HTTPSConnection | None = None

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def handle_one_request(self) -> None:
                try:
                    super().handle_one_request()
                except Exception:
                    self.close_connection = True
                    if not proxy.closing:  # else the upstream was cut under a watch: expected
                        raise

            def _any(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(size) if size else None
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = None
                action = proxy._action(self.command, self.path, body)
                if action == "refuse":
                    proxy._record(Seen(self.command, self.path, body, action, 0))
                    self._answer(503, "refused by the test proxy")
                    return
                if action == "hold":
                    proxy._record(Seen(self.command, self.path, body, action, 0))
                    proxy.held.wait(60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
                if raw is not None:
                    headers["Content-Length"] = str(len(raw))
                if self.upstream is None:
                    self.upstream = proxy._connect()
                self.upstream.request(self.command, self.path, raw, headers)
                resp = self.upstream.getresponse()
                if action == "lose":
                    resp.read()
                    proxy._record(Seen(self.command, self.path, body, action, resp.status))
                    self._answer(500, "the answer was lost by the test proxy")
                    return
                if action == "pass":
                    proxy._record(Seen(self.command, self.path, body, action, resp.status))
                self.send_response(resp.status)
                for key, value in resp.getheaders():
                    if key.lower() not in HOP:
                        self.send_header(key, value)
                length = resp.getheader("Content-Length")
                if length is not None:
                    data = resp.read()
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    self.wfile.flush()
                    return
                self.send_header("Transfer-Encoding", "chunked")  # a watch: streamed as it comes
                self.end_headers()
                while chunk := resp.read1(65536):
                    self.wfile.write(b"%x\r\n%b\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

            def _answer(self, status: int, message: str) -> None:
                data = json.dumps(
                    {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                     "message": message, "code": status}
                ).encode()  # fmt: skip
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                self.wfile.flush()

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any

        return Handler
