"""An independently written quick fleet generator, for generalization checks of the predictor.

Deliberately different from ``predictor/generator.py`` (which the default model is trained on):
exponential rather than linear precursor growth, heavier-tailed noise, rack cooling events,
probes on a ring, its own confounder mix. The predictor never trains on it.

    python benchmarks/alt_generator.py OUT_DIR --seed 7 --nodes 32 --days 2 --interval 30
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from collector.fleet_trace import FleetTrace, TraceMeta, write_trace

KINDS = ("ecc", "thermal", "nvlink", "pcie", "nic", "sudden")


def generate(*, seed: int, nodes: int = 32, gpus: int = 8, days: float = 2.0,
             interval_s: float = 30.0, failures_per_1000_node_days: float = 60.0,
             start: float = 1.7e9, benign_frac: float = 0.04, fast: bool = False) -> FleetTrace:
    """A fleet trace with failures.csv; ``fast`` makes precursors last minutes, not hours."""
    rng = np.random.default_rng(seed)
    steps = int(days * 86400 / interval_s)
    t = start + np.arange(steps) * interval_s
    n, g = nodes, gpus
    names = [f"h{i:03d}" for i in range(n)]
    present = np.ones((steps, n), dtype=bool)
    temp = 55 + rng.normal(0, 3, (1, n, g)) + rng.standard_t(4, (steps, n, g)) * 0.6
    slow = np.ones(n)
    slow[rng.choice(n, max(1, n // 16), replace=False)] = 1.18  # chronically slow, healthy
    compute = np.tile(slow, (steps, 1)) * (1 + rng.normal(0, 0.01, (steps, n)))
    sbe_rate = np.where(rng.random((n, g)) < benign_frac, rng.uniform(3, 40, (n, g)), 0.02) / 3600
    sbe_inc = rng.poisson(np.broadcast_to(sbe_rate * interval_s, (steps, n, g))).astype(float)
    pcie_inc = rng.poisson(0.001, (steps, n, g)).astype(float)
    nvl_inc = rng.poisson(np.where(rng.random((n, g)) < 0.03, 0.05, 0.0005), (steps, n, g))
    nvl_inc = nvl_inc.astype(float)
    remap = np.zeros((steps, n, g))
    throttle = np.zeros((steps, n, g))
    bw_factor = np.ones((steps, n))
    events: list[tuple[float, str, int, str, int]] = []
    racks = np.arange(n) // 4
    for _ in range(rng.poisson(days * 3)):  # rack cooling events: hot but healthy
        r, s0 = rng.integers(racks.max() + 1), rng.integers(steps)
        dur = int(rng.uniform(1200, 3600) / interval_s)
        temp[s0:s0 + dur, racks == r] += rng.uniform(6, 12)
    for _ in range(rng.poisson(days * 4)):  # job-wide stalls and checkpoints
        s0, dur = rng.integers(steps), int(rng.uniform(120, 900) / interval_s) + 1
        compute[s0:s0 + dur] *= rng.uniform(1.5, 4)
    for _ in range(rng.poisson(days * n * 0.3)):  # application XIDs
        events.append((float(rng.choice(t)), names[rng.integers(n)], int(rng.integers(g)),
                       "xid", int(rng.choice([13, 31, 43, 45]))))
    for _ in range(rng.poisson(days * n * 0.05)):  # telemetry gaps
        s0 = rng.integers(steps)
        present[s0:s0 + int(rng.uniform(300, 2400) / interval_s), rng.integers(n)] = False
    resets = [(rng.integers(steps), rng.integers(n)) for _ in range(rng.poisson(days * 2))]
    n_fail = rng.poisson(failures_per_1000_node_days * n * days / 1000)
    fails = []
    for _ in range(n_fail):
        kind = KINDS[rng.choice(6, p=[0.3, 0.15, 0.1, 0.1, 0.15, 0.2])]
        node, gpu = int(rng.integers(n)), int(rng.integers(g))
        fs = int(rng.integers(int(0.15 * steps), steps - 1))
        if not present[fs, node]:
            continue
        pre_s = rng.uniform(60, 240) if fast else float(np.exp(rng.uniform(np.log(2400),
                                                                             np.log(5 * 3600))))
        ps = max(0, fs - int(pre_s / interval_s))
        k = np.arange(fs - ps)
        x = (k + 1) / max(len(k), 1)
        grow = np.expm1(4 * x) / np.expm1(4)  # exponential onset
        sl = slice(ps, fs)
        if kind == "ecc":
            sbe_inc[sl, node, gpu] += rng.poisson(grow * rng.uniform(2, 30))
            remap[sl, node, gpu] += (rng.random(len(k)) < grow * 0.05)
            for s in np.flatnonzero(rng.random(len(k)) < grow * 0.04):
                code = int(rng.choice([63, 92]))
                events.append((float(t[ps + s]), names[node], gpu, "xid", code))
        elif kind == "thermal":
            temp[sl, node, gpu] += grow * rng.uniform(18, 30)
            throttle[sl, node, gpu] = temp[sl, node, gpu] > 83
            compute[sl, node] *= 1 + 0.25 * grow
        elif kind == "nvlink":
            nvl_inc[sl, node, gpu] += rng.poisson(grow * rng.uniform(5, 50))
            for s in np.flatnonzero(rng.random(len(k)) < grow * 0.02):
                events.append((float(t[ps + s]), names[node], gpu, "xid", 74))
        elif kind == "pcie":
            pcie_inc[sl, node, gpu] += rng.poisson(grow * rng.uniform(3, 40))
        elif kind == "nic":
            bw_factor[sl, node] *= 1 - 0.6 * grow
        code = {"ecc": 48, "thermal": 79, "nvlink": 74, "pcie": 79}.get(kind)
        if code:
            events.append((float(t[fs]), names[node], gpu, "xid", code))
        repair = int(rng.uniform(3600, 6 * 3600) / interval_s)
        present[fs + 1:fs + repair, node] = False
        resets.append((min(fs + repair, steps - 1), node))
        level = {"nic": "link", "sudden": "node"}.get(kind, "gpu")
        fails.append((float(t[fs]), names[node], -1 if level != "gpu" else gpu,
                      level, 0.0 if kind == "sudden" else float(t[fs] - t[ps])))
    cum = {c: np.cumsum(v, axis=0) for c, v in
           (("sbe", sbe_inc), ("pcie", pcie_inc), ("nvl", nvl_inc), ("remap", remap))}
    for s0, node in resets:  # driver reloads and replaced parts restart counters at zero
        for v in cum.values():
            v[s0:, node] -= v[s0, node]
    clock = np.where(throttle > 0, 1410.0, 1980.0) + rng.normal(0, 8, temp.shape)
    mask = np.broadcast_to(present[:, :, None], temp.shape)
    ts_grid = np.broadcast_to(t[:, None, None], temp.shape) + rng.uniform(0, 1, temp.shape)
    gpu = pd.DataFrame({
        "ts": ts_grid[mask], "node": np.broadcast_to(np.array(names)[None, :, None],
                                                    temp.shape)[mask],
        "gpu": np.broadcast_to(np.arange(g)[None, None, :], temp.shape)[mask],
        "gpu.utilization": np.clip(rng.normal(0.93, 0.03, temp.shape), 0, 1)[mask],
        "gpu.temperature": temp[mask], "gpu.clock.sm": clock[mask],
        "gpu.power": (520 + 4 * (temp - 55) + rng.normal(0, 15, temp.shape))[mask],
        "gpu.throttle.thermal": throttle[mask], "gpu.throttle.power": np.zeros(mask.sum()),
        "gpu.ecc.sbe": cum["sbe"][mask], "gpu.ecc.dbe": np.zeros(mask.sum()),
        "gpu.rows.remapped.correctable": cum["remap"][mask],
        "gpu.pcie.replay": cum["pcie"][mask], "gpu.nvlink.crc_errors": cum["nvl"][mask],
    }).sort_values("ts", kind="stable")
    coll = compute.max(axis=1, keepdims=True) - compute + 0.15
    nmask = present
    node_df = pd.DataFrame({
        "ts": np.broadcast_to(t[:, None], nmask.shape)[nmask] + 0.5,
        "node": np.broadcast_to(np.array(names)[None, :], nmask.shape)[nmask],
        "train.step.duration": (compute + coll)[nmask], "train.compute.duration": compute[nmask],
        "train.collective.duration": coll[nmask],
    })
    probe = np.arange(0, steps, max(1, int(120 / interval_s)))  # ring probes every ~2 min
    rows = []
    for off in (1, n // 2):
        src = np.arange(n)
        dst = (src + off) % n
        f = np.minimum(bw_factor[probe][:, src], bw_factor[probe][:, dst])
        ok = present[probe][:, src] & present[probe][:, dst]
        bw = 2.4e10 * f * np.exp(rng.normal(0, 0.04, f.shape))
        rows.append(pd.DataFrame({
            "ts": np.broadcast_to(t[probe][:, None], f.shape)[ok] + 2.0,
            "src": np.array(names)[np.broadcast_to(src, f.shape)[ok]],
            "dst": np.array(names)[np.broadcast_to(dst, f.shape)[ok]],
            "net.link.bandwidth": bw[ok], "net.link.latency": (8e-6 / f * np.exp(
                rng.normal(0, 0.05, f.shape)))[ok]}))
    links = pd.concat(rows).sort_values("ts", kind="stable")
    ev = pd.DataFrame(events, columns=["ts", "node", "gpu", "kind", "code"]).sort_values("ts")
    fl = pd.DataFrame(fails, columns=["ts", "node", "gpu", "kind", "precursor_s"]).sort_values("ts")
    meta = TraceMeta(start=float(t[0]), end=float(t[-1] + interval_s), interval_s=interval_s,
                     nodes=tuple(names), gpus_per_node=g, extra={"generator": "alt_generator"})
    return FleetTrace(meta=meta, gpu=gpu.reset_index(drop=True), node=node_df.sort_values("ts"),
                      links=links.reset_index(drop=True), events=ev.reset_index(drop=True),
                      failures=fl.reset_index(drop=True))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("out", type=Path, help="directory to write the trace into")
    p.add_argument("--seed", type=int, default=7, help="random seed")
    p.add_argument("--nodes", type=int, default=32, help="nodes in the fleet")
    p.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    p.add_argument("--days", type=float, default=2.0, help="trace length in days")
    p.add_argument("--interval", type=float, default=30.0, help="sampling interval, seconds")
    p.add_argument("--failures", type=float, default=60.0,
                   help="failures per 1,000 node-days (inflated so short traces have some)")
    a = p.parse_args()
    trace = generate(seed=a.seed, nodes=a.nodes, gpus=a.gpus, days=a.days,
                     interval_s=a.interval, failures_per_1000_node_days=a.failures)
    write_trace(a.out, trace)
    print(f"wrote {a.out}: {len(trace.gpu)} gpu rows, {len(trace.failures or [])} failures")


if __name__ == "__main__":
    main()
