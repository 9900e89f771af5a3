"""Fire -> receive latency of webhook alerts, with a healthy receiver alone and next to one
that hangs on every request.

    python benchmarks/webhook_latency.py --alerts 40 [--db sqlite:///tmp/bench.db]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from api import alert_state
from api.alert_state import RiskObservation
from api.app import create_app
from api.settings import Settings
from api.subscriptions import Subscription
from collector.store import Store


def _serve(arrivals: dict[str, float] | None) -> tuple[ThreadingHTTPServer, str]:
    """A receiver recording arrival times by fingerprint, or (None) one that hangs."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if arrivals is None:
                time.sleep(30)
                return
            arrivals[json.loads(body)["alerts"][0]["fingerprint"]] = time.time()
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/hook"


async def _measure(db_url: str, n: int, *, with_hung: bool) -> list[float]:
    store = Store.open(db_url)
    arrivals: dict[str, float] = {}
    servers = [_serve(arrivals)]
    if with_hung:
        servers.append(_serve(None))
    with store.session() as session:
        for i, (_, url) in enumerate(servers):
            session.add(Subscription(name=f"r{i}-{time.time_ns()}", url=url,
                                     secret="benchmark-secret-0123456789", filters="{}",
                                     enabled=True, source="api", created_at=time.time(),
                                     updated_at=time.time()))
    app = create_app(Settings(db_url=db_url, webhook_timeout_s=2.0), store=store)
    fired: dict[str, float] = {}
    job = f"bench-{time.time_ns()}"  # fresh alerts even on a reused --db
    async with app.router.lifespan_context(app):
        for i in range(n):
            obs = RiskObservation(job=job, node=f"n{i}", gpu=0, peer=None, kind="gpu",
                                  risk=0.9, lead_s=600.0, signals=("bench",),
                                  model_version="bench", ts=time.time())

            def fire(o: RiskObservation = obs) -> str:
                with store.session() as session:
                    fp = alert_state.fire(session, o).fingerprint
                fired[fp] = time.time()  # after commit: what the scorer would see
                return fp

            await asyncio.to_thread(fire)
            await asyncio.sleep(0.05)
        deadline = time.time() + 10
        while len(arrivals) < n and time.time() < deadline:
            await asyncio.sleep(0.05)
    for server, _ in servers:
        server.shutdown()
    store.close()
    return [arrivals[fp] - t for fp, t in fired.items() if fp in arrivals]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--alerts", type=int, default=40, help="Alerts to fire per scenario.")
    parser.add_argument("--db", default=None, help="Store URL (default: a temp SQLite file).")
    args = parser.parse_args()
    for with_hung in (False, True):
        db = args.db or f"sqlite:///{tempfile.mkdtemp()}/bench.db"
        lat = sorted(asyncio.run(_measure(db, args.alerts, with_hung=with_hung)))
        label = "healthy receiver next to a hung one" if with_hung else "healthy receiver alone"
        if not lat:
            print(f"{'with' if with_hung else 'without'} a hung receiver: nothing received")
            continue
        p95 = lat[int(0.95 * (len(lat) - 1))]
        print(f"{label}: {len(lat)}/{args.alerts} received; fire->receive "
              f"p50 {statistics.median(lat) * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms, "
              f"max {lat[-1] * 1000:.0f} ms")


if __name__ == "__main__":
    main()
