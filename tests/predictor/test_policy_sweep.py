"""benchmarks/policy_sweep.py: ``--only`` picks the traces a cache run scores, and a prefix that
names none of them says which there are instead of caching nothing."""

from __future__ import annotations

import sys
from pathlib import Path

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
