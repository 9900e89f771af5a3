"""Scoring small batches: one OpenMP thread (``model.SERIAL_BELOW_ROWS``) against all of them,
side by side in one run, on an idle host or beside busy processes.

    python benchmarks/small_batches.py                 # idle host
    python benchmarks/small_batches.py --busy 2        # beside two processes that spin

A backtest tick or a service tick of a small fleet scores tens to hundreds of rows. Boosted trees
open an OpenMP parallel region per tree, so such a batch spends its time at barriers, and beside
a busy process each barrier waits out a descheduled thread (CI timed a 6-h, 8-node backtest out
at 300 s that took 8.5 s alone). Prints ms per ``KindModel.risk`` call (the GPU model) for each
batch size on one thread and on every OpenMP thread, and which of the two the shipped limit
picks.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time
from collections.abc import Callable
from multiprocessing.synchronize import Event

import numpy as np
import pandas as pd

import predictor.model as model_mod
from predictor.model import RiskModel


def _spin(stop: Event) -> None:
    x = 0
    while not stop.is_set():
        x += 1


def _per_call_ms(risk: Callable[[pd.DataFrame], np.ndarray], x: pd.DataFrame, limit: int,
                 seconds: float) -> float:
    model_mod.SERIAL_BELOW_ROWS = limit
    calls, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        risk(x)
        calls += 1
    return (time.perf_counter() - t0) / calls * 1000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", default="32,256,1024,16384",
                   help="batch sizes to time, comma-separated (default: %(default)s)")
    p.add_argument("--busy", type=int, default=0,
                   help="processes spinning beside the scorer, as a loaded host (default: 0)")
    p.add_argument("--seconds", type=float, default=2.0,
                   help="time per batch size and mode, each measured twice, alternating")
    a = p.parse_args()
    km = RiskModel.load().kinds["gpu"]
    rng = np.random.default_rng(0)
    stop = mp.Event()
    spinners = [mp.Process(target=_spin, args=(stop,), daemon=True) for _ in range(a.busy)]
    for s in spinners:
        s.start()
    shipped = model_mod.SERIAL_BELOW_ROWS
    try:
        print(f"ms per call, GPU model, {a.busy} busy process(es) beside it; shipped: one "
              f"thread below {shipped} rows")
        print(f"{'rows':>7} {'1 thread':>9} {'all':>9} {'all/1':>6}  shipped")
        for rows in (int(r) for r in a.rows.split(",")):
            x = pd.DataFrame(rng.normal(size=(rows, len(km.features))), columns=km.features)
            km.risk(x)  # warm-up
            serial, threads = [], []
            for _ in range(2):
                serial.append(_per_call_ms(km.risk, x, rows + 1, a.seconds / 2))
                threads.append(_per_call_ms(km.risk, x, 0, a.seconds / 2))
            s_ms, t_ms = float(np.mean(serial)), float(np.mean(threads))
            pick = "1 thread" if rows < shipped else "all"
            print(f"{rows:>7} {s_ms:>9.2f} {t_ms:>9.2f} {t_ms / s_ms:>6.2f}  {pick}")
    finally:
        model_mod.SERIAL_BELOW_ROWS = shipped
        stop.set()
        for s in spinners:
            s.join()


if __name__ == "__main__":
    main()
