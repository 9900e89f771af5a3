"""The DCGM-style threshold baseline."""

from __future__ import annotations

from predictor.features import FeatureEngine
from predictor.hysteresis import AlertPolicy
from predictor.rules import RULES_POLICY, SOFT_RISK, RulesModel
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
    # A soft threshold: a warning that alarms once it has held for RULES_POLICY.persist_s.
    assert _risks(steady, 3.0).loc[("gpu", "n000", 3), "risk"] == SOFT_RISK
    assert RULES_POLICY.fire_at <= SOFT_RISK < RULES_POLICY.fire_now_at
    assert RULES_POLICY.persist_s > 0


def test_rules_give_no_lead_estimate_and_a_version() -> None:
    risks = _risks(Spec(), 1.0)
    assert risks["lead_s"].isna().all()
    assert RulesModel().version == "rules-2"


def test_a_soft_threshold_alarms_only_once_it_has_held_and_a_hard_fault_at_once() -> None:
    steady = _risks(Spec(benign_sbe=("n000", 3), benign_sbe_per_h=300.0), 3.0).reset_index()
    xid = _risks(Spec(extra_events=[(T0 + 1800, "n001", 2, 79)]), 0.7).reset_index()
    soft = AlertPolicy(config=RULES_POLICY)
    hard = AlertPolicy(config=RULES_POLICY)
    assert soft.step(steady, T0) == []
    assert [tr.action for tr in hard.step(xid, T0)] == ["fire"]
    assert soft.step(steady, T0 + 300) == []
    fired = soft.step(steady, T0 + RULES_POLICY.persist_s)
    assert [(tr.action, tr.node, tr.gpu) for tr in fired] == [("fire", "n000", 3)]
