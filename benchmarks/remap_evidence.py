"""How often a GPU's repeated row remaps were followed by its failure, counted on the traces alone
(no model): the evidence behind ``predictor.scorer.REMAP_RISK`` (predictor/ROUNDS.md, round 26).

    python benchmarks/remap_evidence.py [--set validation|suites] [--rounds 3] [--least 1]

For every GPU, the first moment it has had ``--least`` row-remap XIDs (``--codes``) within
``--window`` seconds (by default the scorer's own: ``predictor.features.REMAP_*``), and whether a
failure of that GPU followed within 6 hours (``predictor.evaluate.HORIZON_S``, the scoring horizon
of ../shared/fleet-trace.md), with the time left; per generator. A single remap (``--least 1``)
shows what a routine one says.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from predictor.evaluate import HORIZON_S
from predictor.features import REMAP_REPEAT_S, REMAP_REPEATS, REMAP_XIDS

sys.path.insert(0, str(Path(__file__).parent))
from policy_sweep import _generator, _makers  # the same fleets the sweep caches


def first_repeats(events: pd.DataFrame, codes: set[int], least: int,
                  window_s: float) -> list[tuple[str, int, float]]:
    """(node, gpu, time) of each GPU's first ``least`` XIDs of ``codes`` within ``window_s``."""
    ev = events[(events["kind"].astype(str) == "xid") & events["code"].isin(list(codes))
                & (events["gpu"].fillna(-1) >= 0)]
    out = []
    for (node, gpu), g in ev.groupby(["node", "gpu"]):
        ts = np.sort(g["ts"].to_numpy(dtype=np.float64))
        for i in range(least - 1, len(ts)):
            if ts[i] - ts[i - least + 1] < window_s:
                out.append((str(node), int(gpu), float(ts[i])))
                break
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--set", dest="which", choices=("validation", "suites"), default="validation",
                   help="policy_sweep's fresh fleets of the three generators, or the five suites")
    p.add_argument("--rounds", type=int, default=3,
                   help="validation: rounds of ten fresh fleets (3: the 30 the figures use)")
    p.add_argument("--codes", default=",".join(map(str, sorted(REMAP_XIDS))),
                   help="XIDs that count (63 remap, 64 remap failed)")
    p.add_argument("--least", type=int, default=REMAP_REPEATS,
                   help="how many of them make a repeat")
    p.add_argument("--window", type=float, default=REMAP_REPEAT_S,
                   help="within this many seconds")
    a = p.parse_args()
    codes = {int(c) for c in a.codes.split(",")}
    rows = []
    for name, make in _makers(a.which, a.rounds).items():
        trace = make()
        assert trace.failures is not None
        f = trace.failures
        for node, gpu, t in first_repeats(trace.events, codes, a.least, a.window):
            hit = f[(f["node"] == node) & (f["gpu"] == gpu) & (f["ts"] >= t)
                    & (f["ts"] <= t + HORIZON_S)]
            left = (float(hit["ts"].min()) - t) / 60 if len(hit) else np.nan
            rows.append((_generator(name), left))
        print(f"{name}: {len(rows)} so far", file=sys.stderr, flush=True)
    df = pd.DataFrame(rows, columns=["generator", "minutes_left"])
    print(f"GPUs with {a.least}+ of XID {sorted(codes)} within {a.window:.0f} s, "
          "and a failure of that GPU within 6 h after:")
    for g, d in [*df.groupby("generator"), ("pooled", df)]:
        left = d["minutes_left"].dropna()
        if not len(left):
            print(f"  {g:24s} 0/{len(d)} failed")
            continue
        print(f"  {g:24s} {len(left)}/{len(d)} failed; minutes left median {left.median():.1f} "
              f"({left.min():.1f}-{left.max():.1f})")


if __name__ == "__main__":
    main()
