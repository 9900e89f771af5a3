"""The demo's webhook receiver accepts what the service signs and rejects forgeries and replays."""

from __future__ import annotations

import json
import time

import httpx

from api.webhooks import sign
from trainer.receiver import WebhookReceiver

SECRET = "a-long-enough-demo-secret"


def _post(url: str, body: bytes, *, ts: int, signature: str) -> int:
    return httpx.post(url, content=body, headers={
        "Content-Type": "application/json", "X-Foreshock-Timestamp": str(ts),
        "X-Foreshock-Signature": signature, "X-Foreshock-Delivery": "k1"}).status_code


def test_signed_deliveries_are_accepted_forgeries_and_replays_are_not() -> None:
    receiver = WebhookReceiver(SECRET).start()
    try:
        payload = {"version": "4", "status": "firing", "alerts": [
            {"status": "firing", "labels": {"node": "node-c", "gpu": "0"}}]}
        body = json.dumps(payload).encode()
        now = int(time.time())
        assert _post(receiver.url, body, ts=now, signature=sign(SECRET, now, body)) == 204
        assert _post(receiver.url, body, ts=now, signature=sign("wrong-secret-xxxxxxxx", now,
                                                                  body)) == 401
        tampered = body.replace(b"node-c", b"node-a")
        assert _post(receiver.url, tampered, ts=now, signature=sign(SECRET, now, body)) == 401
        old = now - 3600
        assert _post(receiver.url, body, ts=old, signature=sign(SECRET, old, body)) == 401
        assert receiver.rejected == 3
        first = receiver.first_firing(node="node-c")
        assert first is not None and first.payload == payload and first.delivery_key == "k1"
        assert receiver.first_firing(node="node-a") is None
    finally:
        receiver.stop()
