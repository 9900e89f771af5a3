"""How long from a firing alert to training resumed on the remaining nodes, model aside.

Starts ``foreshock serve`` on a temporary SQLite store and a 3-node elastic job of the example
trainer (torchrun agents, gloo, decisions on), fires an alert on one node straight into the
store once training runs, and prints when the decision was taken, acknowledged, checkpointed,
drained and resumed. Usage: ``python benchmarks/drain_resume.py [--runs N]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from api.alert_state import RiskObservation, fire
from collector.store import Store
from trainer.drain import read_events
from trainer.elastic import ElasticCluster, ElasticConfig, free_port

NODES = ("node-a", "node-b", "node-c")


def _serve(work: Path) -> tuple[str, subprocess.Popen[bytes], str]:
    port, db = free_port(), f"sqlite:///{work / 'foreshock.db'}"
    env = {**os.environ, "FORESHOCK_SCORE_INTERVAL_S": "3600", "FORESHOCK_DRAIN_MIN_NODES": "2"}
    proc = subprocess.Popen([sys.executable, "-m", "api", "serve", "--db", db, "--port",
                             str(port), "--log-level", "warning"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return url, proc, db
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError("foreshock serve did not start")


def run_once(work: Path) -> dict[str, float]:
    url, service, db = _serve(work)
    store = Store.open(db)
    argv = ["-m", "trainer.example", "--steps", "400", "--step-period", "0.25", "--d-model", "64",
            "--layers", "1", "--seq-len", "32", "--batch-size", "4", "--log-every", "0",
            "--endpoint", url, "--job", "bench", "--gpu", "off", "--export-interval", "1",
            "--probe-interval", "0", "--profile-every", "0", "--checkpoint-dir",
            str(work / "ckpt"), "--checkpoint-every", "40", "--decisions", "--poll-interval", "1",
            "--agree-every", "4", "--min-nodes", "2"]
    cluster = ElasticCluster(ElasticConfig(nodes=NODES, min_nodes=2, run_id="bench"), argv=argv,
                             log_dir=work / "logs")
    try:
        cluster.start()
        deadline = time.time() + 120
        while time.time() < deadline:  # the service must see the ranks step first
            events = read_events(work / "ckpt")
            if events and time.time() - events[0]["ts"] > 5:
                break
            time.sleep(0.5)
        alert_at = time.time()
        with store.session() as s:
            fire(s, RiskObservation(job="bench", node="node-c", gpu=0, peer=None, kind="gpu",
                                    risk=0.95, lead_s=600.0, signals=("benchmark",),
                                    model_version="bench", ts=alert_at))
        while time.time() < deadline + 60:
            events = read_events(work / "ckpt")
            if any(e["event"] == "resumed" for e in events):
                break
            time.sleep(0.2)
        r = httpx.get(f"{url}/api/v1/decisions", params={"job": "bench"}).json()
        at = {e["event"]: e["ts"] for e in reversed(events)}
        return {"decision": r[0]["created_at"] - alert_at if r else float("nan"),
                "agreed": at.get("decision", float("nan")) - alert_at,
                "checkpointed": at.get("checkpoint", float("nan")) - alert_at,
                "resumed": at.get("resumed", float("nan")) - alert_at}
    finally:
        cluster.stop()
        service.terminate()
        service.wait()
        store.engine.dispose()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--runs", type=int, default=1, help="repetitions")
    args = p.parse_args()
    results = []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="foreshock-bench-") as work:
            results.append(run_once(Path(work)))
        print(f"run {i + 1}: " + ", ".join(f"{k} +{v:.1f} s" for k, v in results[-1].items()))
    for key in results[0]:
        print(f"median alert -> {key}: {statistics.median(r[key] for r in results):.1f} s")


if __name__ == "__main__":
    main()
