"""Leave one generator out: does training on a second, independently written generator help on a
third that the model never saw?

    OMP_NUM_THREADS=1 python benchmarks/cross_generator.py DIR [--fleets 12] [--jobs 2]

Replays once the first shipped member's 30 training fleets of ours (``train_default.MEMBERS[0]``)
and ``--fleets`` fleets each of ``alt_generator`` and ``third_generator`` (seeds 2000 on and 2100
on: outside every suite, validation and training seed), fits one single model (no average, the
first member's fit seed) on each combination of them, scores the 30 fresh validation fleets of
``policy_sweep.py`` with each (cached under ``DIR/<combination>``, so a second run only prints)
and prints the default policy's figures per generator. A generator left out of a combination's
training is unseen by it: compare its line with the model trained on ours alone. Fleets of the
sets are interleaved in proportion, so that the calibration's unshuffled folds hold a share of
each. About 50 minutes on two cores (48 in round 25, sharing them with a test run for 17).
Measured in round 25 (predictor/ROUNDS.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

from collector.fleet_trace import FleetTrace
from predictor.dataset import KINDS, LabelConfig, Rows, collect
from predictor.hysteresis import PolicyConfig
from predictor.model import FitConfig, RiskModel
from predictor.train_default import MEMBERS, training_traces
from predictor.training import fit_rows, trace_source

sys.path.insert(0, str(Path(__file__).parent))
import alt_generator
import policy_sweep
import third_generator

COMBINATIONS: tuple[tuple[str, ...], ...] = (
    ("ours",), ("ours", "alt"), ("ours", "third"), ("ours", "alt", "third"))
SEED_BASES = {"alt": 2000, "third": 2100}


def _fleets(name: str, count: int) -> Iterator[FleetTrace]:
    """One set's training fleets, generated one at a time (a fleet holds millions of rows)."""
    if name == "ours":
        yield from training_traces(30, 0, MEMBERS[0])
        return
    base = SEED_BASES[name]
    for i in range(count):
        if name == "alt":
            yield alt_generator.generate(seed=base + i, nodes=(32, 48)[i % 2], days=2.0,
                                         interval_s=(10.0, 15.0, 30.0, 60.0)[i % 4])
        else:
            yield third_generator.generate(seed=base + i, nodes=(32, 48)[i % 2], days=2.0,
                                           interval_s=(15.0, 30.0, 60.0)[i % 3])


def _rows(args: tuple[str, int]) -> list[tuple[str, dict[str, Rows]]]:
    """Each fleet's labelled rows of one set, in order (negatives kept as training keeps them)."""
    name, count = args
    t0 = time.time()
    rng = np.random.default_rng(MEMBERS[0].fit_seed if name == "ours" else SEED_BASES[name])
    out = []
    for trace in _fleets(name, count):
        rows = {k: Rows() for k in KINDS}
        collect(trace, rows, config=LabelConfig(), rng=rng)
        out.append((f"{name}:{trace_source(trace)}", rows))
    print(f"replayed {len(out)} fleets of {name} ({time.time() - t0:.0f} s)", flush=True)
    return out


def _interleaved(sets: list[list[tuple[str, dict[str, Rows]]]]
                 ) -> tuple[dict[str, Rows], list[str]]:
    """All fleets' rows, the sets' fleets spread evenly through the order."""
    order = sorted(((i + 0.5) / len(s), j, i) for j, s in enumerate(sets) for i in range(len(s)))
    merged = {k: Rows() for k in KINDS}
    sources = []
    for _, j, i in order:
        source, rows = sets[j][i]
        sources.append(source)
        for k in KINDS:
            for part in dataclasses.fields(Rows):
                getattr(merged[k], part.name).extend(getattr(rows[k], part.name))
    return merged, sources


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir", type=Path, help="where the models and cached risks go (reused)")
    p.add_argument("--fleets", type=int, default=12,
                   help="training fleets of each independent generator, two days of 32 or 48 "
                        "nodes each (default 12)")
    p.add_argument("--jobs", type=int, default=2, help="processes for the replay and the scoring")
    a = p.parse_args()
    models = {"+".join(c): a.dir / f"{'+'.join(c)}.skops" for c in COMBINATIONS}
    todo = [c for c in COMBINATIONS if not models["+".join(c)].exists()]
    if todo:
        names = sorted({n for c in todo for n in c})
        with ProcessPoolExecutor(a.jobs) as pool:
            rows = dict(zip(names, pool.map(_rows, [(n, a.fleets) for n in names]), strict=True))
        a.dir.mkdir(parents=True, exist_ok=True)
        for c in todo:
            merged, sources = _interleaved([rows[n] for n in c])
            model = fit_rows(merged, labels=LabelConfig(), sources=sources,
                             config=FitConfig(seed=MEMBERS[0].fit_seed))
            model.save(models["+".join(c)])
            print(f"fitted {'+'.join(c)}: {model.version}", flush=True)
        del rows
    lines: dict[str, dict[str, str]] = {}
    for combo, path in models.items():
        policy_sweep.cache(a.dir / combo, "validation", str(path), a.jobs, rounds=3)
        lines[combo] = policy_sweep.figures(policy_sweep.load_cached(a.dir / combo, "validation"),
                                            PolicyConfig())
    print("\nrecall (precursor) / precision / false per 1,000 node-days (median lead); the 30 "
          "fresh fleets, default policy; * = a generator the model never trained on")
    for combo, by_gen in lines.items():
        print(f"\n== trained on {combo} ({RiskModel.load(models[combo]).version})")
        for gen, line in by_gen.items():
            unseen = "*" if gen in SEED_BASES and gen not in combo.split("+") else " "
            print(f"  {unseen} {gen:7s} {line}")


if __name__ == "__main__":
    main()
