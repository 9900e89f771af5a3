"""Alert policies side by side, without scoring a trace twice.

    OMP_NUM_THREADS=1 python benchmarks/policy_sweep.py cache DIR          # score once, keep risks
    OMP_NUM_THREADS=1 python benchmarks/policy_sweep.py sweep DIR [--set validation]
    OMP_NUM_THREADS=1 python benchmarks/policy_sweep.py diff DIR --against OLD_DIR  # what moved

(a) and (b) of the suites alone, scored at a minute's cadence:

    python benchmarks/policy_sweep.py cache DIR --set suites --every 60 --only unseen --only shifted

The alert policy (``predictor.hysteresis``) sees only each node's riskiest entity at each tick,
so ``cache`` backtests every trace once with a model and keeps that row per node and tick
(``risks.csv.gz``) with the trace's labels and size; ``sweep`` then replays the cached risks
through each policy variant in ``VARIANTS`` and scores the alerts with ``predictor.evaluate``:
the same alerts ``foreshock backtest`` writes for that policy, in seconds instead of a backtest.
``diff`` reads two caches of the same set (say, one model against another) through the default
policy and names, trace by trace, the failures with a precursor that only one of them caught and
the false episodes that only one of them raised: the figures say how much moved, this says what.

Four sets: ``validation`` (fresh seeds of the first three generators, used to choose a policy),
``suites`` (the seven suites of ``benchmarks/backtest.py --figures``, for reporting only),
``shaped`` (our generator on fresh seeds with precursors of every shape, not only ramps: how much
a model leans on one shape of growth) and ``later`` (fresh seeds of the fourth and fifth
generators, which came after the lanes were chosen).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import pandas as pd

from collector.fleet_trace import FleetTrace, TraceMeta
from predictor.backtest import ALERT_COLUMNS, run
from predictor.evaluate import Outcomes, outcomes, summarize
from predictor.generator import GeneratorConfig, generate_trace
from predictor.generator_config import PRECURSOR_SHAPES
from predictor.goodput import Goodput, reactive
from predictor.hysteresis import AlertPolicy, PolicyConfig
from predictor.replay import DEFAULT_EVERY_S
from predictor.scorer import load_model
from predictor.signals_absent import ABSENT, without

sys.path.insert(0, str(Path(__file__).parent))
import alt_generator
import fifth_generator
import fourth_generator
import third_generator
from backtest import (
    BASE,
    GOODPUT,
    REAL_RATE,
    at_real_rate,
    band_counts,
    band_text,
    estimate_counts,
    estimate_text,
    scored,
    suite_makers,
)

Maker = Callable[[], FleetTrace]


def _ours(seed: int, interval_s: float, **config: object) -> Maker:
    """A fresh fleet of our generator: ``BASE`` at ``interval_s``, with ``config`` on top."""
    return lambda: generate_trace(GeneratorConfig(  # type: ignore[arg-type]
        seed=seed, **{**BASE, "interval_s": interval_s, **config}))


def _ours_fresh(prefix: str, seed0: int, rounds: int, **config: object) -> dict[str, Maker]:
    """Our generator on fresh seeds, three fleets a round at 30, 15 and 60 s, named
    ``prefix-seed``: the first round takes ``seed0`` on, each next one the seeds after it."""
    return {f"{prefix}-{seed0 + 3 * r + i}": _ours(seed0 + 3 * r + i, iv, **config)
            for r in range(rounds) for i, iv in enumerate((30.0, 15.0, 60.0))}


def _fresh(prefix: str, generate: Callable[..., FleetTrace], seed0: int,
           shapes: tuple[tuple[float, int], ...], rounds: int) -> dict[str, Maker]:
    """Two-day fleets of a held-out generator on fresh seeds, one per ``(interval_s, nodes)`` of
    ``shapes`` a round, named ``prefix-seed``: the first round takes ``seed0`` on, each next one
    the seeds after it."""
    n = len(shapes)
    return {f"{prefix}-{seed0 + n * r + i}": partial(generate, seed=seed0 + n * r + i,
                                                     nodes=nodes, days=2.0, interval_s=iv)
            for r in range(rounds) for i, (iv, nodes) in enumerate(shapes)}


LATER_SHAPES = ((30.0, 32), (15.0, 48), (60.0, 32))
"""Intervals and sizes of the fourth and fifth generators' suites and fresh fleets."""


def _validation(rounds: int = 1) -> dict[str, Maker]:
    """Fresh seeds of each generator, outside training (1000-1329) and the suites' seeds: ten
    fleets a round (ours 70-72, alt 570-572, third 770-773 in the first; the next round takes
    the seeds after those, at the same intervals and sizes)."""
    ours = _ours_fresh("ours", 70, rounds)
    alt = _fresh("alt", alt_generator.generate, 570, ((30.0, 48), (15.0, 48), (60.0, 48)), rounds)
    third = _fresh("third", third_generator.generate, 770,
                   ((15.0, 32), (30.0, 48), (60.0, 32), (15.0, 48)), rounds)
    return {**ours, **alt, **third}


def _later(rounds: int = 1) -> dict[str, Maker]:
    """Fresh seeds of the fourth and fifth generators, the two written after the policy's lanes
    were chosen: three fleets of each a round (fourth 810-812, fifth 910-912 in the first; the
    suites use 800-805 and 900-905) at the suites' sizes and intervals."""
    return {**_fresh("fourth", fourth_generator.generate, 810, LATER_SHAPES, rounds),
            **_fresh("fifth", fifth_generator.generate, 910, LATER_SHAPES, rounds)}


def _suite_makers() -> dict[str, Maker]:
    out: dict[str, Maker] = {}
    for name, (n, make) in suite_makers(3).items():
        slug = name.replace(",", "").replace(" ", "_")
        for i in range(n):
            out[f"{slug}-{i}"] = lambda make=make, i=i: make(i)
    return out


SHAPED = {shape: 1.0 for shape in PRECURSOR_SHAPES}


def _shaped(rounds: int = 1) -> dict[str, Maker]:
    """Our generator's fresh seeds (90 on, three a round at 30, 15 and 60 s), each precursor
    in any of ``PRECURSOR_SHAPES`` with equal odds."""
    return _ours_fresh("shaped", 90, rounds, precursor_shapes=SHAPED)


def _makers(which: str, rounds: int = 1) -> dict[str, Maker]:
    if which == "suites":
        return _suite_makers()
    return {"validation": _validation, "shaped": _shaped, "later": _later}[which](rounds)


def _cache_one(args: tuple[str, int, str, Path, str | None, float, tuple[str, ...]]) -> str:
    # Names, not makers, cross to workers.
    which, rounds, name, out, model_spec, every_s, absent = args
    path = out / name
    if (path / "risks.csv.gz").exists():
        return f"{name}: cached"
    trace = without(_makers(which, rounds)[name](), absent)
    rows = run(trace, load_model(model_spec), every_s=every_s).timeline  # what the policy reads
    path.mkdir(parents=True, exist_ok=True)
    assert trace.failures is not None
    trace.failures.to_csv(path / "failures.csv", index=False)
    m = trace.meta
    (path / "meta.json").write_text(json.dumps({
        "start": m.start, "end": m.end, "interval_s": m.interval_s, "nodes": list(m.nodes),
        "gpus_per_node": m.gpus_per_node}))
    rows.to_csv(path / "risks.csv.gz", index=False)
    return f"{name}: {len(rows)} rows"


def _generator(name: str) -> str:
    """The generator (or suite) part of a trace named ``<generator>-<seed>``."""
    return name.rsplit("-", 1)[0]


def selected(names: list[str], only: list[str] | None) -> list[str]:
    """The trace names that start with one of ``only`` (all of them for None), in order; a
    prefix that names none of them is an error that lists what there is."""
    if not only:
        return names
    stray = [p for p in only if not any(n.startswith(p) for n in names)]
    if stray:
        groups = sorted({_generator(n) for n in names})
        raise SystemExit(f"--only {stray[0]!r} names no trace of this set; its traces are "
                         f"{', '.join(groups)} (each -0, -1, ...)")
    return [n for n in names if n.startswith(tuple(only))]


def cache(out: Path, which: str, model_spec: str | None, jobs: int, rounds: int = 1,
          every_s: float = DEFAULT_EVERY_S, only: list[str] | None = None,
          absent: tuple[str, ...] = ()) -> None:
    names = selected(list(_makers(which, rounds)), only)
    base = out / which
    base.mkdir(parents=True, exist_ok=True)
    jobs_ = [(which, rounds, n, base, model_spec, every_s, absent) for n in names]
    with ProcessPoolExecutor(jobs) as pool:
        for line in pool.map(_cache_one, jobs_):
            print(line, flush=True)


def _load(path: Path) -> tuple[FleetTrace, pd.DataFrame]:
    meta = json.loads((path / "meta.json").read_text())
    empty = pd.DataFrame({"ts": pd.Series(dtype=float)})
    trace = FleetTrace(meta=TraceMeta(start=meta["start"], end=meta["end"],
                                      interval_s=meta["interval_s"],
                                      nodes=tuple(meta["nodes"]),
                                      gpus_per_node=meta["gpus_per_node"]),
                       gpu=empty, node=empty, links=empty, events=empty,
                       failures=pd.read_csv(path / "failures.csv"))
    # lead_s is read as text and converted once: read in chunks, a column empty on its first
    # rows and numbers later would warn of mixed types.
    rows = pd.read_csv(path / "risks.csv.gz", keep_default_na=False,
                       dtype={"peer": str, "lead_s": str})
    # Empty where there is no estimate (kept as "" by keep_default_na); absent from risks cached
    # before the timeline carried it.
    rows["lead_s"] = pd.to_numeric(rows["lead_s"], errors="coerce") if "lead_s" in rows else np.nan
    return trace, rows


def alerts_for(rows: pd.DataFrame, config: PolicyConfig) -> pd.DataFrame:
    """The alert rows ``predictor.backtest.run`` writes for ``config`` on these top rows."""
    policy = AlertPolicy(config=config)
    out = []
    frame = rows.assign(signals=[()] * len(rows))
    for t, tick in frame.groupby("ts", sort=True):
        for tr in policy.step(tick, float(t)):
            if tr.action != "resolve":
                out.append((tr.ts, tr.node, -1 if tr.gpu is None else tr.gpu, tr.kind,
                            tr.risk, "", np.nan if tr.lead_s is None else tr.lead_s))
    return pd.DataFrame(out, columns=list(ALERT_COLUMNS))


VARIANTS: dict[str, PolicyConfig] = {
    "default": PolicyConfig(),
    "before the quick lane (853cb1b): at once from 0.85 after 5 min": PolicyConfig(
        fire_now_at=0.85, fire_now_hold_s=300.0, quick_at=None),
    "at once from 0.85 after 5 min": PolicyConfig(fire_now_at=0.85, fire_now_hold_s=300.0),
    "at once from 0.9": PolicyConfig(fire_now_at=0.9),
    "at once from 0.95": PolicyConfig(fire_now_at=0.95),
    "no quick lane": PolicyConfig(quick_at=None),
    "quick lane at 0.60": PolicyConfig(quick_at=0.60),
    "quick lane at 0.70": PolicyConfig(quick_at=0.70),
    "persist 10 min": PolicyConfig(persist_s=600.0),
    "persist 20 min": PolicyConfig(persist_s=1200.0),
    "fire from 0.6": PolicyConfig(fire_at=0.6),
    "quick lane at 0.75": PolicyConfig(quick_at=0.75),
    "quick lane after 15 min": PolicyConfig(quick_persist_s=900.0),
    "fire from 0.5": PolicyConfig(fire_at=0.5),
    "slow lane after 45 min": PolicyConfig(slow_persist_s=2700.0),
    "no middle lane": PolicyConfig(mid_at=None),
    "middle lane at 0.30": PolicyConfig(mid_at=0.30),
    "middle lane at 0.40": PolicyConfig(mid_at=0.40),
    "middle lane after 20 min": PolicyConfig(mid_persist_s=1200.0),
    "middle lane after 30 min": PolicyConfig(mid_persist_s=1800.0),
    "before the links' quick lane (round 20): links wait 10 min": PolicyConfig(
        link_quick_persist_s=None),
    "links' quick lane at once": PolicyConfig(link_quick_persist_s=0.0),
}
"""Policies compared by ``sweep``: the default and one change to it each."""


def load_cached(base: Path, which: str) -> dict[str, tuple[FleetTrace, pd.DataFrame]]:
    """The traces' labels and cached risks under ``base/which``, by trace name."""
    where = base / which
    loaded = {p.name: _load(p) for p in sorted(where.iterdir()) if (p / "risks.csv.gz").exists()
              } if where.is_dir() else {}
    if not loaded:
        raise SystemExit(f"no cached risks under {where}/*/risks.csv.gz: give the DIR that "
                         f"`policy_sweep.py cache DIR --set {which}` was given")
    return loaded


def figures(loaded: dict[str, tuple[FleetTrace, pd.DataFrame]], config: PolicyConfig
            ) -> dict[str, str]:
    """One line of figures per generator (traces named ``<generator>-<seed>``), then pooled."""
    groups = sorted({_generator(n) for n in loaded})
    out: dict[str, str] = {}
    pooled: dict[str, float] = dict.fromkeys(("c", "p", "t", "f", "nd"), 0.0)
    pooled_leads: list[float] = []
    pooled_bands: Counter[str] = Counter()
    pooled_priced: list[Goodput] = []
    pooled_traces: list[FleetTrace] = []
    for g in groups:
        tot = dict.fromkeys(pooled, 0.0)
        leads: list[float] = []
        bands: Counter[str] = Counter()
        priced: list[Goodput] = []
        suite: list[FleetTrace] = []
        for name, (trace, rows) in loaded.items():
            if _generator(name) != g:
                continue
            alerts = alerts_for(rows, config)
            rep, caught_leads, price = scored(trace, alerts)
            priced.append(price)
            suite.append(trace)
            tot["c"] += rep.caught_with_precursor
            tot["p"] += rep.failures_with_precursor
            tot["t"] += rep.true_episodes
            tot["f"] += rep.false_episodes
            tot["nd"] += rep.node_days
            leads += caught_leads
            bands.update(band_counts(rep))
            bands.update(estimate_counts(rep))
        for k in pooled:
            pooled[k] += tot[k]
        pooled_leads += leads
        pooled_bands.update(bands)
        pooled_priced += priced
        pooled_traces += suite
        out[g] = _line(tot, leads, bands) + _worth(priced, suite)
    out["pooled"] = _line(pooled, pooled_leads, pooled_bands) + _worth(pooled_priced,
                                                                       pooled_traces)
    return out


def _worth(priced: list[Goodput], traces: list[FleetTrace]) -> str:
    """Goodput with failures as rare as a real fleet's, against no prediction."""
    unwarned = [reactive(t, GOODPUT) for t in traces]
    return (f" goodput at {REAL_RATE:g}/1k node-days {at_real_rate(priced, traces):.3%} "
            f"(none {at_real_rate(unwarned, traces):.3%})")


def sweep(base: Path, which: str, names: list[str] | None) -> None:
    loaded = load_cached(base, which)
    variants = {k: v for k, v in VARIANTS.items() if names is None or k in names}
    print("recall (precursor) / precision / false per 1,000 node-days (median lead) "
          "[recall by precursor length]")
    for label, config in variants.items():
        print(f"\n== {label}: {config}")
        for g, line in figures(loaded, config).items():
            print(f"  {g:24s} {line}")


def differences(old: dict[str, tuple[FleetTrace, pd.DataFrame]],
                new: dict[str, tuple[FleetTrace, pd.DataFrame]],
                config: PolicyConfig | None = None) -> list[str]:
    """What moved between two caches of the same traces under ``config`` (default policy): per
    trace, each failure with a precursor caught by one only and each false episode raised by one
    only (matched by node and start), then the totals. Hours count from the trace's start."""
    config = config or PolicyConfig()
    lines: list[str] = []
    totals = Counter[str]()
    for name in sorted(set(old) & set(new)):
        trace = old[name][0]
        per_side = []
        for side, cached in (("old", old), ("new", new)):
            alerts = alerts_for(cached[name][1], config)
            o = outcomes(trace, alerts)
            report = summarize(o, alerts=len(alerts))
            totals[f"{side} caught"] += report.caught_with_precursor
            totals[f"{side} false"] += report.false_episodes
            per_side.append(o)
        totals["with a precursor"] += report.failures_with_precursor
        lines += [f"{name}: {line}" for line in _moved(*per_side, trace.meta.start)]
    for name in sorted(set(old) ^ set(new)):
        lines.append(f"{name}: only in the {'old' if name in old else 'new'} cache, not compared")
    lines.append(f"caught {totals['old caught']} -> {totals['new caught']} of "
                 f"{totals['with a precursor']} with a precursor; false episodes "
                 f"{totals['old false']} -> {totals['new false']}")
    return lines


def _moved(before: Outcomes, after: Outcomes, t0: float) -> list[str]:
    out = []
    fa, fb = before.failures, after.failures
    for i in np.flatnonzero((fa["precursor_s"] > 0) & (fa["caught"] != fb["caught"])):
        f, caught_now = fa.iloc[i], bool(fb["caught"].iloc[i])
        lead = (fb if caught_now else fa)["lead_s"].iloc[i]
        gpu = f" GPU {f['gpu']}" if f["gpu"] >= 0 else ""
        verb, was = ("caught now", "caught") if caught_now else ("missed now", "was caught")
        out.append(f"{verb}: {f['node']}{gpu} {f['kind']} failure at "
                   f"{(f['ts'] - t0) / 3600:.2f} h after a {f['precursor_s'] / 60:.0f}-min "
                   f"precursor ({was} {lead / 60:.0f} min ahead)")
    keys = []
    for o in (before, after):
        false = o.episodes[o.episodes["verdict"] == "false"]
        keys.append({(e.node, e.start): e for e in false.itertuples(index=False)})
    for label, mine, other in (("gone", keys[0], keys[1]), ("new", keys[1], keys[0])):
        for key in sorted(mine.keys() - other.keys(), key=lambda k: (k[1], k[0])):
            e = mine[key]
            out.append(f"false episode {label}: {e.node} {e.kinds} from "
                       f"{(e.start - t0) / 3600:.2f} h for {(e.end - e.start) / 60:.0f} min, "
                       f"risk up to {e.max_score:.2f}")
    return out


def _line(tot: dict[str, float], leads: list[float], bands: Counter[str]) -> str:
    lead = f"{np.median(leads) / 60:.0f} min" if leads else "-"
    return (f"{tot['c']:.0f}/{tot['p']:.0f} {tot['t'] / max(tot['t'] + tot['f'], 1):.2f} "
            f"{tot['f'] / tot['nd'] * 1000:.1f} ({lead}; {tot['f']:.0f} false) "
            f"[{band_text(bands)}; {estimate_text(bands)}]")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=("cache", "sweep", "diff"),
                   help="cache: backtest once and keep risks; sweep: replay policies on them; "
                        "diff: the catches and false episodes that differ from --against's")
    p.add_argument("dir", type=Path, help="where the cached risks live")
    p.add_argument("--set", dest="which", choices=("validation", "suites", "shaped", "later"),
                   default="validation",
                   help="fresh seeds of our, the alt and the third generator (choose a policy "
                        "on these), the seven suites (report), our generator's fresh seeds with "
                        "precursors of every shape, or fresh seeds of the fourth and fifth "
                        "generators (later)")
    p.add_argument("--model", default=None, help="skops model path (default: the shipped one)")
    p.add_argument("--jobs", type=int, default=2, help="traces scored at once (cache)")
    p.add_argument("--rounds", type=int, default=1,
                   help="validation, shaped, later: rounds of fresh fleets to cache (ten, three, "
                        "six; each round the next seeds of each generator); sweep pools whatever "
                        "is cached")
    p.add_argument("--every", type=float, default=DEFAULT_EVERY_S,
                   help="cache: scoring period in trace seconds (the service scores every 30)")
    p.add_argument("--only", action="append", default=None, metavar="PREFIX",
                   help="cache: only the traces whose name starts with PREFIX (repeatable; e.g. "
                        "--only unseen_seeds --only shifted_params for (a) and (b) of the "
                        "suites, at --every 60 a 35-minute run instead of four hours)")
    p.add_argument("--absent", action="append", default=[], choices=tuple(ABSENT),
                   metavar="SIGNAL",
                   help="cache: take SIGNAL out of every trace before scoring it, as a fleet "
                        f"that never exported it (repeatable; one of {', '.join(ABSENT)})")
    p.add_argument("--variant", action="append", default=None,
                   help="policy variant to sweep, by name (repeatable; default: all)")
    p.add_argument("--against", type=Path, default=None, metavar="OLD_DIR",
                   help="diff: the cache to compare DIR with (both of --set; read through the "
                        "default policy)")
    a = p.parse_args()
    if a.action == "diff" and a.against is None:
        p.error("diff needs --against OLD_DIR: the cache DIR is compared with")
    if a.every <= 0:  # else every worker fails on it, one traceback per trace
        p.error(f"--every must be > 0 seconds, got {a.every:g}")
    if a.action == "cache":
        cache(a.dir, a.which, a.model, a.jobs, a.rounds, a.every, a.only, tuple(a.absent))
    elif a.action == "diff":
        print("\n".join(differences(load_cached(a.against, a.which), load_cached(a.dir, a.which))))
    else:
        sweep(a.dir, a.which, a.variant)


if __name__ == "__main__":
    main()
