"""A local webhook receiver that checks Foreshock's signature the way a user's would: HMAC-SHA256
over ``"<timestamp>.<raw body>"`` with the subscription's secret, within five minutes."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOLERANCE_S = 300.0


@dataclass(frozen=True, kw_only=True)
class Delivery:
    """One POST the receiver accepted."""

    received_at: float
    payload: dict[str, Any]
    delivery_key: str


@dataclass(kw_only=True)
class _State:
    deliveries: list[Delivery] = field(default_factory=list)
    rejected: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def signature_ok(secret: str, timestamp: str, body: bytes, header: str,
                 now: float | None = None) -> bool:
    """Whether ``header`` (``v1=<hex>``, possibly several comma-separated) signs ``body``."""
    try:
        ts = int(timestamp)
    except ValueError:
        return False
    if abs((time.time() if now is None else now) - ts) > TOLERANCE_S:
        return False
    expected = "v1=" + hmac.new(secret.encode(), f"{ts}.".encode() + body,
                                hashlib.sha256).hexdigest()
    return any(hmac.compare_digest(expected, part.strip()) for part in header.split(","))


class WebhookReceiver:
    """Accepts signed alert webhooks on 127.0.0.1 (port 0: a free one); rejects forgeries."""

    def __init__(self, secret: str) -> None:
        self.secret = secret
        self._state = _State()
        state, key = self._state, secret

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                ok = signature_ok(key, self.headers.get("X-Foreshock-Timestamp", ""), body,
                                  self.headers.get("X-Foreshock-Signature", ""))
                with state.lock:
                    if ok:
                        state.deliveries.append(Delivery(
                            received_at=time.time(), payload=json.loads(body),
                            delivery_key=self.headers.get("X-Foreshock-Delivery", "")))
                    else:
                        state.rejected += 1
                self.send_response(204 if ok else 401)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                return None  # the demo prints its own timeline

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="webhook-receiver")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/alerts"

    def start(self) -> WebhookReceiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def deliveries(self) -> list[Delivery]:
        with self._state.lock:
            return list(self._state.deliveries)

    @property
    def rejected(self) -> int:
        with self._state.lock:
            return self._state.rejected

    def first_firing(self, *, node: str) -> Delivery | None:
        """The first verified delivery with a firing alert on ``node``."""
        for d in self.deliveries:
            for alert in d.payload.get("alerts", []):
                if alert.get("status") == "firing" and alert.get("labels", {}).get("node") == node:
                    return d
        return None
