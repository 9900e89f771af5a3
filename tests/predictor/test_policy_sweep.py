"""benchmarks/policy_sweep.py: ``--only`` picks the traces a cache run scores, and a prefix that
names none of them says which there are instead of caching nothing; cached lead estimates load as
numbers without a warning; ``diff`` names the catches and false episodes two caches differ by."""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import policy_sweep as ps


def test_only_keeps_the_traces_of_the_suites_it_names_in_order() -> None:
    names = list(ps._makers("suites"))
    picked = ps.selected(names, ["shifted_params", "unseen_seeds"])
    assert picked == [n for n in names if n.split("-")[0] in ("unseen_seeds", "shifted_params")]
    assert len(picked) == 6
    assert ps.selected(names, None) == names


def test_only_with_a_prefix_that_names_no_trace_lists_the_suites() -> None:
    with pytest.raises(SystemExit, match=r"--only 'unseen seeds'.*unseen_seeds"):
        ps.selected(list(ps._makers("suites")), ["unseen seeds"])


def test_a_scoring_period_of_zero_is_refused_before_any_trace_is_scored(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["policy_sweep.py", "cache", str(tmp_path), "--every", "0"])
    with pytest.raises(SystemExit) as exc:
        ps.main()
    assert exc.value.code == 2
    assert "--every must be > 0 seconds, got 0" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # nothing cached


def test_a_cache_whose_lead_estimates_start_empty_loads_them_as_numbers(tmp_path: Path) -> None:
    # A long fleet's first hours have no lead estimate (no risk above 0.2 yet): pandas reads big
    # files in chunks, and a column empty in one chunk and numeric in the next warned of mixed
    # types on the 60-s caches of round 37.
    n = 300_000
    lead = np.full(n, np.nan)
    lead[n // 2:] = 5400.0
    pd.DataFrame({"ts": np.arange(n, dtype=float), "node": "n0", "kind": "gpu", "gpu": 0,
                  "peer": "", "risk": 0.1, "lead_s": lead}).to_csv(
        tmp_path / "risks.csv.gz", index=False)
    (tmp_path / "meta.json").write_text(json.dumps({
        "start": 0.0, "end": float(n), "interval_s": 30.0, "nodes": ["n0"], "gpus_per_node": 8}))
    pd.DataFrame({"ts": [float(n)], "node": ["n0"], "gpu": [0], "kind": ["gpu"],
                  "precursor_s": [600.0]}).to_csv(tmp_path / "failures.csv", index=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, rows = ps._load(tmp_path)
    assert rows["lead_s"].dtype == float
    assert rows["lead_s"].isna().sum() == n // 2
    assert (rows["lead_s"].dropna() == 5400.0).all()


def _cache(base: Path, node_risk: dict[str, Callable[[np.ndarray], np.ndarray]]) -> Path:
    """A one-trace cache of ``suites`` under ``base``: two nodes scored every 5 minutes for
    10 hours, risk per node from ``node_risk``; n0 fails at 8 h 20 min after a 1-hour precursor."""
    where = base / "suites" / "unseen_seeds-0"
    where.mkdir(parents=True)
    ts = np.arange(0.0, 36_000.0, 300.0)
    pd.concat([pd.DataFrame({"ts": ts, "node": node, "kind": "gpu", "gpu": 0, "peer": "",
                             "risk": risk(ts), "lead_s": np.nan})
               for node, risk in node_risk.items()]).sort_values(["ts", "node"]).to_csv(
        where / "risks.csv.gz", index=False)
    (where / "meta.json").write_text(json.dumps({
        "start": 0.0, "end": 36_000.0, "interval_s": 30.0, "nodes": ["n0", "n1"],
        "gpus_per_node": 8}))
    pd.DataFrame({"ts": [30_000.0], "node": ["n0"], "gpu": [0], "kind": ["gpu"],
                  "precursor_s": [3600.0]}).to_csv(where / "failures.csv", index=False)
    return base


def test_diff_names_the_catch_gained_and_the_false_episode_gone(tmp_path: Path) -> None:
    def quiet(ts: np.ndarray) -> np.ndarray:
        return np.full(len(ts), 0.05)

    def spell(lo: float, hi: float) -> Callable[[np.ndarray], np.ndarray]:
        return lambda ts: np.where((ts >= lo) & (ts < hi), 0.95, 0.05)

    # The old model missed n0's failure and raised a false alarm on n1 at 1 h 40 min; the new
    # one warns of n0 50 minutes ahead (from 7 h 30 min, at once from 0.92) and leaves n1 alone.
    old = ps.load_cached(_cache(tmp_path / "old", {"n0": quiet, "n1": spell(6000, 7500)}),
                         "suites")
    new = ps.load_cached(_cache(tmp_path / "new", {"n0": spell(27_000, 30_000), "n1": quiet}),
                         "suites")
    lines = ps.differences(old, new)
    assert lines[0] == ("unseen_seeds-0: caught now: n0 GPU 0 gpu failure at 8.33 h after a "
                        "60-min precursor (caught 50 min ahead)")
    assert lines[1].startswith("unseen_seeds-0: false episode gone: n1 gpu from 1.67 h for ")
    assert lines[1].endswith("risk up to 0.95")
    assert lines[-1] == "caught 0 -> 1 of 1 with a precursor; false episodes 1 -> 0"
    assert len(lines) == 3
    # And the other way round: what was gained is now lost.
    back = ps.differences(new, old)
    assert back[0].startswith("unseen_seeds-0: missed now: n0 GPU 0 gpu failure at 8.33 h")
    assert back[0].endswith("(was caught 50 min ahead)")
    assert back[1].startswith("unseen_seeds-0: false episode new: n1 gpu from 1.67 h")
    assert back[-1] == "caught 1 -> 0 of 1 with a precursor; false episodes 0 -> 1"


def test_diff_without_a_cache_to_compare_with_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["policy_sweep.py", "diff", str(tmp_path)])
    with pytest.raises(SystemExit) as exc:
        ps.main()
    assert exc.value.code == 2
    assert "diff needs --against OLD_DIR" in capsys.readouterr().err
