"""benchmarks/false_episodes.py: it reads what the fourth generator drew without changing the trace,
names each episode's class right, and its oracle holds only the GPU and time it is given."""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import false_episodes as fe
import fourth_generator as fg

FLEET = {"seed": 12, "nodes": 32, "days": 1.0, "interval_s": 60.0}


def test_the_episodes_drawn_are_the_failures_precursors_heals_and_bursts() -> None:
    plain = fg.generate(**FLEET)
    drawn = fe.drawn_episodes(partial(fg.generate, **FLEET))
    assert fg._episodes.__name__ == "_episodes"  # the generator is left as it was
    again = fg.generate(**FLEET)
    pd.testing.assert_frame_equal(plain.gpu, again.gpu)

    assert plain.failures is not None
    with_precursor = plain.failures[plain.failures["precursor_s"] > 0]
    pre = [d for d in drawn if d.cls == "pre"]
    assert len(pre) == len(with_precursor) > 0
    for d in pre:  # each precursor ends at a failure of its own node
        fails = with_precursor.loc[with_precursor["node"] == d.node, "ts"].to_numpy()
        to_failure = fails - d.ts[np.flatnonzero(d.x > 0)[-1]]
        assert ((to_failure >= 0) & (to_failure < fg.LATENT_DT_S + 2 * FLEET["interval_s"])).any()

    bursts = [d for d in drawn if d.cls == "burst"]
    assert bursts and all(d.channel in fe.ERROR_CHANNELS for d in bursts)
    for d in bursts:  # one hump: up to its peak, down after it
        on = d.x[d.x > 0]
        peak = int(np.argmax(on))
        assert np.all(np.diff(on[: peak + 1]) >= 0) and np.all(np.diff(on[peak:]) <= 0)
    heals = [d for d in drawn if d.cls == "heal"]
    assert heals and all(d.x[-1] < d.x.max() for d in heals if d.x.max() > fe.VISIBLE)


def test_the_oracle_holds_one_gpu_for_the_time_given() -> None:
    ts = np.arange(0.0, 3600.0, 60.0)
    x = np.where((ts >= 600) & (ts < 1800), 1.0, 0.0)
    d = fe.Drawn(cls="burst", channel="ecc", node="n1", gpu=3, ts=ts, x=x)
    rows = pd.DataFrame({"ts": np.concatenate([ts, ts]), "node": "n1",
                         "kind": ["gpu"] * len(ts) + ["node"] * len(ts),
                         "gpu": [3] * len(ts) + [-1] * len(ts), "risk": 0.9})
    held = fe.held(rows, [d], for_s=300.0)
    low = held["risk"] < 0.9
    assert held.loc[low, "risk"].eq(fe.HELD_RISK).all()
    assert set(held.loc[low, "ts"]) == {600.0, 660.0, 720.0, 780.0, 840.0}
    assert set(held.loc[low, "kind"]) == {"gpu"}
    throughout = fe.held(rows, [d], for_s=None)
    # while it shows, and for the hour the features still read it
    assert set(throughout.loc[throughout["risk"] < 0.9, "ts"]) == set(ts[ts >= 600])
    assert rows["risk"].eq(0.9).all()  # the cached rows themselves are left alone
