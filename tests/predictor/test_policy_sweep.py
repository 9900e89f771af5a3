"""benchmarks/policy_sweep.py: ``--only`` picks the traces a cache run scores, and a prefix that
names none of them says which there are instead of caching nothing; cached lead estimates load as
numbers without a warning."""

from __future__ import annotations

import json
import sys
import warnings
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
