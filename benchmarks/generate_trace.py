"""How long the fleet generator takes: a 2-day, 32-node x 8-GPU, 30-second trace by default.

    python benchmarks/generate_trace.py [--nodes 32 --gpus 8 --days 2 --interval 30 --out DIR]

Prints the time to simulate (in memory) and to write the fleet-trace files.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from predictor.generator import GeneratorConfig, generate, write_generated


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=32)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--days", type=float, default=2.0)
    parser.add_argument("--interval", type=float, default=30.0)
    parser.add_argument("--failures", type=float, default=100.0, help="per 1,000 node-days")
    parser.add_argument("--out", type=Path, default=None, help="keep the trace here")
    args = parser.parse_args()
    config = GeneratorConfig(seed=0, nodes=args.nodes, gpus_per_node=args.gpus, days=args.days,
                             interval_s=args.interval, failure_rate=args.failures)
    began = time.perf_counter()
    generated = generate(config)
    simulated = time.perf_counter() - began
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp) / "trace"
        began = time.perf_counter()
        write_generated(out, generated)
        written = time.perf_counter() - began
        size = sum(p.stat().st_size for p in out.iterdir())
    trace = generated.trace
    gpus = args.nodes * args.gpus
    print(f"trace: {args.days:g} days, {args.nodes} nodes x {args.gpus} GPUs ({gpus} GPUs), "
          f"{args.interval:g} s interval")
    print(f"rows: {len(trace.gpu):,} gpu, {len(trace.node):,} node, {len(trace.links):,} links, "
          f"{len(trace.events):,} events, {len(generated.plan)} failures")
    print(f"simulate: {simulated:.2f} s")
    print(f"write:    {written:.2f} s ({size / 1e6:.1f} MB on disk)")
    print(f"total:    {simulated + written:.2f} s")


if __name__ == "__main__":
    main()
