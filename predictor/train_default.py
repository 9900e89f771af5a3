"""Rebuild the shipped default model, ``predictor/models/default.skops``:

    OMP_NUM_THREADS=1 python -m predictor.train_default [--out predictor/models/default.skops]

Trains on fleets from ``predictor.generator`` whose parameters are drawn at random per seed
(fleet size, sampling interval from 1 s to 60 s, failure mix, precursor length and strength,
noise, confounder rates), so that the model learns the signatures rather than one generator
setting. Seeds 1000-1999 are training seeds; evaluations use other seeds. Deterministic: the
same command gives the same model (and version string).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from predictor.dataset import LabelConfig
from predictor.failure_mix import MODES
from predictor.generator import GeneratorConfig, generate_trace
from predictor.model import DEFAULT_MODEL_PATH, FitConfig
from predictor.training import fit_traces

TRAIN_SEED_BASE = 1000


def training_configs(count: int, *, seed: int = 0) -> list[GeneratorConfig]:
    """``count`` generator settings spread around the defaults (and a few fast, fine-grained
    ones, like a degradation that develops within minutes at 1-s sampling)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        fast = i % 5 == 4
        mix: dict[str, float] = {str(m): float(rng.uniform(0.3, 1.5)) for m in MODES}
        interval = float(rng.choice([2.0, 5.0])) if fast else float(rng.choice([10, 15, 30, 60]))
        days = 0.25 if fast else float(rng.choice([1.0, 1.5, 2.0]))
        nodes = int(rng.choice([8, 16, 24])) if fast else int(rng.choice([16, 24, 32, 48]))
        out.append(GeneratorConfig(
            seed=TRAIN_SEED_BASE + i, nodes=nodes, days=days, interval_s=interval,
            link_interval_s=float(rng.choice([60, 120, 300])),
            failure_count=int(nodes * days * (0.4 if fast else 0.5)),
            repair_scale=0.05, mix=mix,
            precursor_share={m: (0.0 if m.endswith("sudden") else 0.85) for m in MODES},
            precursor_min_s=60.0 if fast else 600.0,
            precursor_max_s=900.0 if fast else 8 * 3600.0,
            intensity_min=0.3, intensity_max=3.0,
            noise=float(rng.uniform(0.6, 1.6)), confounders=float(rng.uniform(0.5, 2.0)),
            benign_sbe_fraction=float(rng.uniform(0.01, 0.1)),
            slow_node_fraction=float(rng.uniform(0.0, 0.12)),
            stalls_per_day=float(rng.uniform(0.5, 5.0)),
            transient_bursts_per_gpu_day=float(rng.choice([0.0, 0.01, 0.03])),
        ))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", type=Path, default=DEFAULT_MODEL_PATH, help="model file to write")
    p.add_argument("--traces", type=int, default=30, help="generated training fleets")
    p.add_argument("--every", type=float, default=300.0, help="replay period, trace seconds")
    a = p.parse_args()
    t0 = time.time()
    configs = training_configs(a.traces)
    traces = (generate_trace(c) for c in configs)
    model = fit_traces(traces, labels=LabelConfig(every_s=a.every), config=FitConfig(),
                       progress=lambda s: print(f"  replayed {s} ({time.time() - t0:.0f} s)"))
    model.save(a.out)
    size = a.out.stat().st_size / 1e6
    print(f"wrote {a.out} ({size:.2f} MB), model {model.version}, {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
