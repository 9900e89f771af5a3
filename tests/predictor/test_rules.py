"""The DCGM-style threshold baseline."""

from __future__ import annotations

from predictor.features import FeatureEngine
from predictor.rules import RulesModel
from predictor.scorer import Scorer
from tests.predictor.conftest import T0, Spec, make_trace


def _risks(spec: Spec, hours: float):
    engine = FeatureEngine(interval_s=spec.interval_s)
    t = T0 + hours * 3600
    engine.update(make_trace(spec), t)
    return Scorer(RulesModel()).score(engine.features(t)).set_index(["kind", "node", "gpu"])


def test_hardware_xid_fires_and_application_xids_do_not() -> None:
    t = T0 + 1800
    risks = _risks(Spec(app_xids=30, extra_events=[(t, "n001", 2, 79)]), 0.7)
    assert risks.loc[("gpu", "n001", 2), "risk"] == 1.0
    assert "XID 79" in risks.loc[("gpu", "n001", 2), "signals"][0]
    assert risks["risk"].sum() == 1.0


def test_rules_alarm_on_a_steady_benign_error_rate() -> None:
    # The weakness the learned model fixes: a fixed SBE line cannot tell steady from growing.
    assert _risks(Spec(benign_sbe=("n000", 3)), 3.0).loc[("gpu", "n000", 3), "risk"] == 0.0
    steady = Spec(benign_sbe=("n000", 3), benign_sbe_per_h=300.0)
    assert _risks(steady, 3.0).loc[("gpu", "n000", 3), "risk"] == 1.0


def test_rules_give_no_lead_estimate_and_a_version() -> None:
    risks = _risks(Spec(), 1.0)
    assert risks["lead_s"].isna().all()
    assert RulesModel().version == "rules-1"
