"""Scoring speed: one tick of the online path (ingest a sample of every GPU, compute features,
score every GPU, node and link, step the alert policy) for a 16,384-GPU fleet on one core.

    OMP_NUM_THREADS=1 python benchmarks/scoring.py [--gpus 16384] [--model PATH|rules]

Target (predictor issue): <= 1 s per tick.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core, as the target says

import numpy as np
import pandas as pd

from collector.fleet_trace import FleetTrace, TraceMeta, empty_frame
from predictor.features import FeatureEngine
from predictor.hysteresis import AlertPolicy
from predictor.scorer import Scorer, load_model


def fleet_tick(rng: np.random.Generator, t: float, nodes: int, gpus: int,
               counters: np.ndarray) -> FleetTrace:
    """One sample of every GPU, node and ring link at time ``t``."""
    n = nodes * gpus
    names = np.array([f"n{i:05d}" for i in range(nodes)], dtype=object)
    counters += rng.poisson(0.01, counters.shape)
    gpu = pd.DataFrame({
        "ts": t + rng.uniform(0, 1, n), "node": np.repeat(names, gpus),
        "gpu": np.tile(np.arange(gpus), nodes),
        "gpu.utilization": rng.uniform(0.8, 1.0, n),
        "gpu.memory.used": rng.uniform(6e10, 7e10, n),
        "gpu.temperature": rng.normal(60, 3, n), "gpu.memory.temperature": rng.normal(70, 3, n),
        "gpu.power": rng.normal(600, 20, n), "gpu.clock.sm": rng.normal(1980, 10, n),
        "gpu.throttle.thermal": np.zeros(n), "gpu.throttle.power": np.zeros(n),
        "gpu.ecc.sbe": counters[:, 0], "gpu.ecc.dbe": np.zeros(n),
        "gpu.rows.remapped.correctable": np.zeros(n),
        "gpu.rows.remapped.uncorrectable": np.zeros(n),
        "gpu.rows.remap.pending": np.zeros(n), "gpu.pcie.replay": counters[:, 1],
        "gpu.nvlink.crc_errors": counters[:, 2],
    })
    node = pd.DataFrame({"ts": t + 0.5, "node": names,
                         "train.step.duration": rng.normal(2, 0.02, nodes),
                         "train.compute.duration": rng.normal(1.5, 0.02, nodes),
                         "train.collective.duration": rng.normal(0.5, 0.02, nodes)})
    links = pd.DataFrame({"ts": t + 0.7, "src": names, "dst": np.roll(names, 1),
                          "net.link.bandwidth": rng.normal(2.4e10, 5e8, nodes),
                          "net.link.latency": rng.normal(1e-5, 5e-7, nodes)})
    meta = TraceMeta(start=t, end=t + 30, interval_s=30.0, nodes=tuple(names), gpus_per_node=gpus)
    return FleetTrace(meta=meta, gpu=gpu, node=node, links=links, events=empty_frame("events.csv"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--gpus", type=int, default=16384, help="GPUs in the fleet (8 per node)")
    p.add_argument("--model", default=None, help="skops model path or 'rules' (default: shipped)")
    p.add_argument("--ticks", type=int, default=10, help="timed ticks after 20 warm-up ticks")
    a = p.parse_args()
    rng = np.random.default_rng(0)
    nodes = a.gpus // 8
    counters = np.zeros((a.gpus, 3))
    engine, policy = FeatureEngine(interval_s=30.0), AlertPolicy()
    scorer = Scorer(load_model(a.model))
    t = 1.7e9
    chunks = [fleet_tick(rng, t + 30 * i, nodes, 8, counters) for i in range(20 + a.ticks)]
    times: list[tuple[float, float, float]] = []
    for i, chunk in enumerate(chunks):
        t_i = t + 30 * i + 30
        t0 = time.perf_counter()
        engine.update(chunk, t_i)
        t1 = time.perf_counter()
        feats = engine.features(t_i)
        t2 = time.perf_counter()
        policy.step(scorer.score(feats), t_i)
        t3 = time.perf_counter()
        if i >= 20:
            times.append((t1 - t0, t2 - t1, t3 - t2))
    arr = np.array(times)
    print(f"fleet: {a.gpus} GPUs, {nodes} nodes, {nodes} links; model {scorer.version}")
    print(f"ingest   {arr[:, 0].mean() * 1000:7.1f} ms/tick")
    print(f"features {arr[:, 1].mean() * 1000:7.1f} ms/tick")
    print(f"score    {arr[:, 2].mean() * 1000:7.1f} ms/tick (risk, signals, alert policy)")
    print(f"total    {arr.sum(axis=1).mean() * 1000:7.1f} ms/tick "
          f"(max {arr.sum(axis=1).max() * 1000:.1f}); target <= 1000 ms")


if __name__ == "__main__":
    main()
