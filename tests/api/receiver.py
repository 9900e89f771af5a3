"""A real HTTP webhook receiver on a free loopback port, scriptable to fail, hang and recover."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    at: float
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """Answers each POST with the next scripted behaviour: an HTTP status, or ``"hang"``
    (hold the request until released); once the script is used up it answers 200."""

    url: str = ""
    script: list[int | str] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    """Requests it accepted with a 2xx."""
    attempts: int = 0
    release: threading.Event = field(default_factory=threading.Event)
    _cond: threading.Condition = field(default_factory=threading.Condition)

    def wait_for(self, n: int, timeout: float = 10.0) -> list[Received]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.received) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"receiver got {len(self.received)} of {n} after {timeout} s "
                        f"({self.attempts} attempts)")
                self._cond.wait(left)
            return list(self.received)

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        body = handler.rfile.read(int(handler.headers.get("Content-Length", 0)))
        with self._cond:
            self.attempts += 1
            action = self.script.pop(0) if self.script else 200
        if action == "hang":
            self.release.wait(30)
            return  # the client gave up long ago; close without an answer
        assert isinstance(action, int)
        if 200 <= action < 300:
            with self._cond:
                self.received.append(Received(time.time(), dict(handler.headers.items()), body))
                self._cond.notify_all()
        handler.send_response(action)
        handler.send_header("Content-Length", "0")
        handler.end_headers()


@contextmanager
def receiver(script: list[int | str] | None = None, port: int = 0) -> Iterator[Receiver]:
    """Serve a ``Receiver`` on ``127.0.0.1:port`` (0: any free port) until the block ends."""
    recv = Receiver(script=list(script or []))

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            recv._handle(self)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    recv.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield recv
    finally:
        recv.release.set()
        server.shutdown()
        server.server_close()
