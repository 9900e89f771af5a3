"""The online scoring path and the alert policy (hysteresis, persistence, one alert per node)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from predictor import scorer as scorer_module
from predictor.backtest import run
from predictor.features import FeatureEngine, Features
from predictor.hysteresis import AlertPolicy, PolicyConfig
from predictor.model import RiskModel
from predictor.scorer import RISK_COLUMNS, Scorer
from tests.predictor.conftest import T0, Spec, make_trace


def test_scores_every_entity_with_risk_lead_and_signals(tiny_model: RiskModel) -> None:
    trace = make_trace(Spec(seed=9, ecc_ramp=("n002", 1, 2.0, 5.5)))
    engine = FeatureEngine(interval_s=30.0)
    t = T0 + 5.2 * 3600
    engine.update(trace, t)
    risks = Scorer(tiny_model).score(engine.features(t))
    assert tuple(risks.columns) == RISK_COLUMNS
    assert (risks["kind"] == "gpu").sum() == 16 and (risks["kind"] == "node").sum() == 4
    assert risks["risk"].between(0, 1).all()
    gpus = risks[risks["kind"] == "gpu"].set_index(["node", "gpu"])
    bad = gpus.loc[("n002", 1)]
    assert bad["risk"] == gpus["risk"].max() and bad["risk"] > 0.2
    assert bad["lead_s"] > 0
    assert any("ECC" in s or "XID" in s for s in bad["signals"])


def _stops(frame: pd.DataFrame, node: str, at: float) -> pd.DataFrame:
    """``frame`` with ``node``'s rows after ``at`` gone (the node went down then)."""
    return frame[(frame["node"] != node) | (frame["ts"] <= at)]


def _frame(rows: list[tuple[str, int, float]]) -> pd.DataFrame:
    return pd.DataFrame([{"kind": "gpu", "node": n, "gpu": g, "peer": "", "risk": r,
                          "lead_s": 3600.0, "signals": ("sig",)} for n, g, r in rows])


def test_alert_fires_only_after_persisting_and_resolves_with_hysteresis() -> None:
    policy = AlertPolicy(config=PolicyConfig(fire_at=0.5, fire_now_at=0.95, persist_s=600,
                                             resolve_below=0.2, resolve_after_s=900))
    actions = []
    for i, r in enumerate([0.6, 0.6, 0.6, 0.3, 0.1, 0.1, 0.1, 0.1]):
        actions.append([tr.action for tr in policy.step(_frame([("a", 0, r), ("b", 0, 0.01)]),
                                                        T0 + 300 * i)])
    # persists 600 s -> fires at the third tick; 0.3 is above resolve_below, so still firing;
    # below 0.2 from the fifth tick, resolved 900 s later.
    assert actions == [[], [], ["fire"], ["update"], ["update"], ["update"], ["update"],
                       ["resolve"]]


def test_blip_below_persistence_never_fires_but_a_certain_risk_fires_at_once() -> None:
    policy = AlertPolicy(config=PolicyConfig(persist_s=600))
    assert policy.step(_frame([("a", 0, 0.7)]), T0) == []
    assert policy.step(_frame([("a", 0, 0.1)]), T0 + 300) == []
    # Near-certain (>= fire_now_at, 0.92) fires at the first tick it is seen ...
    assert policy.config.fire_now_at == 0.92
    assert policy.step(_frame([("a", 0, 0.9)]), T0 + 600) == []
    assert [tr.action for tr in policy.step(_frame([("a", 0, 0.95)]), T0 + 900)] == ["fire"]
    # ... unless a hold is asked for: then a leap from nothing waits until the risk has stood
    # at slow_at or above for that long (a single slow probe round, a burst that passes).
    held = AlertPolicy(config=PolicyConfig(fire_now_hold_s=300.0))
    assert held.step(_frame([("a", 0, 0.99)]), T0) == []
    assert held.step(_frame([("a", 0, 0.1)]), T0 + 300) == []
    assert held.step(_frame([("a", 0, 0.3)]), T0 + 600) == []
    assert [tr.action for tr in held.step(_frame([("a", 0, 0.99)]), T0 + 900)] == ["fire"]
    # Without a slow lane to measure the hold by, the hold cannot apply.
    bare = AlertPolicy(config=PolicyConfig(fire_now_hold_s=300.0, slow_at=None))
    assert [tr.action for tr in bare.step(_frame([("a", 0, 0.99)]), T0)] == ["fire"]


def test_a_high_risk_fires_on_the_quick_lane_before_the_main_one() -> None:
    # The last minutes of a short precursor: 0.7 fires after 10 min (quick lane at 0.65),
    # 0.6 only after the main lane's 15 min, and a dip under 0.65 restarts the quick clock.
    def first_fire(risks: list[float], config: PolicyConfig | None = None,
                   kinds: str | None = None) -> int | None:
        """Minutes to the first fire of one node whose riskiest entity is, tick by tick, a GPU
        (``g``) or a link (``l``); a GPU at every tick without ``kinds``."""
        policy = AlertPolicy(config=config or PolicyConfig())
        for i, (r, k) in enumerate(zip(risks, kinds or "g" * len(risks), strict=True)):
            tick = _frame([("a", 0, r)]).assign(kind="link" if k == "l" else "gpu",
                                                gpu=-1 if k == "l" else 0)
            if policy.step(tick, T0 + 300 * i):
                return 5 * i
        return None

    assert first_fire([0.7] * 5) == 10
    assert first_fire([0.6] * 5) == 15
    assert first_fire([0.7, 0.7, 0.6, 0.7, 0.7, 0.7]) == 15  # the main lane, from 0 min
    assert first_fire([0.7] * 5, PolicyConfig(quick_at=None)) == 15
    # A link's risk (a NIC read in probe rounds, no bursts that pass) fires after 5 minutes,
    # as long as the riskiest entity stays a link: a GPU taking over waits the full 10.
    assert first_fire([0.7] * 5, kinds="lllll") == 5
    assert first_fire([0.7] * 5, kinds="glggg") == 10
    assert first_fire([0.7] * 5, kinds="gglll") == 10
    assert first_fire([0.6] * 5, kinds="lllll") == 15  # under the quick lane's level
    assert first_fire([0.7] * 5, PolicyConfig(link_quick_persist_s=None), kinds="lllll") == 10
    # A user's stricter fire_at lifts the quick lane with it: no alert below their threshold.
    strict = PolicyConfig().overridden(fire_at=0.8)
    assert strict.quick_at == 0.8 and first_fire([0.7] * 5, strict) is None
    with pytest.raises(ValueError, match="quick_at"):
        PolicyConfig(quick_at=-0.1)
    with pytest.raises(ValueError, match="quick_persist_s"):
        PolicyConfig(quick_persist_s=-1.0)
    with pytest.raises(ValueError, match="link_quick_persist_s"):
        PolicyConfig(link_quick_persist_s=-1.0)


def test_one_alert_per_node_naming_the_first_riskiest_entity() -> None:
    policy = AlertPolicy(config=PolicyConfig(persist_s=0))
    fired = policy.step(_frame([("a", 3, 0.8), ("a", 5, 0.7), ("b", 0, 0.1)]), T0)
    assert [(tr.action, tr.node, tr.gpu) for tr in fired] == [("fire", "a", 3)]
    again = policy.step(_frame([("a", 3, 0.6), ("a", 5, 0.9)]), T0 + 300)
    assert [(tr.action, tr.gpu, tr.risk) for tr in again] == [("update", 3, 0.9)]


def test_a_node_that_stops_reporting_resolves() -> None:
    policy = AlertPolicy(config=PolicyConfig(persist_s=0))
    policy.step(_frame([("a", 0, 0.9), ("b", 0, 0.1)]), T0)
    out = policy.step(_frame([("b", 0, 0.1)]), T0 + 300)
    assert [(tr.action, tr.node) for tr in out] == [("resolve", "a")]
    assert policy.firing() == []


def test_policy_config_errors_name_the_field() -> None:
    with pytest.raises(ValueError, match="fire_at"):
        PolicyConfig(fire_at=1.5)
    with pytest.raises(ValueError, match="resolve_below"):
        PolicyConfig(fire_at=0.3, resolve_below=0.5)
    with pytest.raises(ValueError, match="fire_now_hold_s"):
        PolicyConfig(fire_now_hold_s=-1.0)


def test_a_node_past_a_fatal_xid_is_failed_not_at_risk(tiny_model: RiskModel) -> None:
    # The ECC ramp ends in XID 48 at 5.0 h; the node keeps reporting its sick GPU after it.
    trace = make_trace(Spec(seed=9, ecc_ramp=("n002", 1, 2.0, 5.0)))
    engine = FeatureEngine(interval_s=30.0)
    scorer = Scorer(tiny_model)
    engine.update(trace, T0 + 4.9 * 3600)
    before = scorer.score(engine.features(T0 + 4.9 * 3600)).set_index(["kind", "node", "gpu"])
    assert before.loc[("gpu", "n002", 1), "risk"] > 0.2
    engine.update(trace, T0 + 5.5 * 3600)
    after = scorer.score(engine.features(T0 + 5.5 * 3600))
    on_node = after[after["node"] == "n002"]
    assert len(on_node) and (on_node["risk"] == 0).all() and on_node["lead_s"].isna().all()
    assert all(s[0].startswith("failed: XID 48") for s in on_node["signals"])
    assert (after[after["node"] != "n002"]["risk"] < 0.2).all()


def test_a_node_that_has_gone_silent_is_not_warned_of_on_its_last_features(
        tiny_model: RiskModel) -> None:
    # n002's ECC ramp runs from 2.0 h; at 4.6 h every row of n002 stops (the node went down),
    # while the feature windows would still score it for 15 min on its last, stale rows.
    full = make_trace(Spec(seed=9, ecc_ramp=("n002", 1, 2.0, 5.5)))
    cut = T0 + 4.6 * 3600
    trace = replace(full, gpu=_stops(full.gpu, "n002", cut), node=_stops(full.node, "n002", cut))
    engine = FeatureEngine(interval_s=30.0)
    scorer = Scorer(tiny_model)
    engine.update(trace, cut + 60)
    live = scorer.score(engine.features(cut + 60)).set_index(["kind", "node", "gpu"])
    assert live.loc[("gpu", "n002", 1), "risk"] > 0.2  # a minute of quiet is not silence
    engine.update(trace, cut + 600)
    later = scorer.score(engine.features(cut + 600))
    on_node = later[later["node"] == "n002"]
    assert len(on_node) and (on_node["risk"] == 0).all() and on_node["lead_s"].isna().all()
    assert all(s == ("silent: no sample for 10 min",) for s in on_node["signals"])
    # Sampled every 15 s, a node quiet for 90 s has missed six samples: it went down with its
    # failure, and a warning now would come after the fact.
    fast = make_trace(Spec(seed=9, interval_s=15.0, ecc_ramp=("n002", 1, 2.0, 5.5)))
    fast = replace(fast, gpu=_stops(fast.gpu, "n002", cut), node=_stops(fast.node, "n002", cut))
    engine = FeatureEngine(interval_s=15.0)
    engine.update(fast, cut + 30)
    live = scorer.score(engine.features(cut + 30)).set_index(["kind", "node", "gpu"])
    assert live.loc[("gpu", "n002", 1), "risk"] > 0.2
    engine.update(fast, cut + 90)
    gone = scorer.score(engine.features(cut + 90))
    assert (gone[gone["node"] == "n002"]["risk"] == 0).all()
    # A node whose training hook stops while its GPUs keep reporting is still watched.
    hook_cut = replace(full, node=_stops(full.node, "n002", cut))
    engine = FeatureEngine(interval_s=30.0)
    engine.update(hook_cut, cut + 600)
    watched = scorer.score(engine.features(cut + 600)).set_index(["kind", "node", "gpu"])
    assert watched.loc[("gpu", "n002", 1), "risk"] > 0.2


def test_rows_remapped_twice_within_the_hour_fire_at_once(tiny_model: RiskModel) -> None:
    # n001/GPU 3 remaps a row at 3.0 h and again at 3.5 h, with no error growth at all; n003/GPU 0
    # remaps once (routine); n000/GPU 2 remaps twice, 2.2 hours apart.
    remaps = [(T0 + 3.0 * 3600, "n001", 3, 63), (T0 + 3.5 * 3600, "n001", 3, 63),
              (T0 + 3.0 * 3600, "n003", 0, 63),
              (T0 + 1.0 * 3600, "n000", 2, 63), (T0 + 3.2 * 3600, "n000", 2, 63)]
    trace = make_trace(Spec(seed=9, extra_events=remaps))
    engine, scorer = FeatureEngine(interval_s=30.0), Scorer(tiny_model)
    policy = AlertPolicy()

    def step(t: float) -> tuple[pd.DataFrame, list[str]]:
        engine.update(trace, t)
        risks = scorer.score(engine.features(t))
        fired = [f"{tr.node}/{tr.gpu}" for tr in policy.step(risks, t) if tr.action == "fire"]
        return risks.set_index(["kind", "node", "gpu"]), fired

    once, fired = step(T0 + 3.4 * 3600)  # one remap each on n001 and n003, two hours apart on n000
    assert once.loc[("gpu", "n001", 3), "risk"] < 0.5 and fired == []
    twice, fired = step(T0 + 3.5 * 3600 + 60)
    bad = twice.loc[("gpu", "n001", 3)]
    assert bad["risk"] >= PolicyConfig().fire_now_at and fired == ["n001/3"]
    assert bad["signals"][0] == "HBM rows remapped 2 times in the last hour (XID 63/64)"
    assert twice.loc[("gpu", "n003", 0), "risk"] < 0.5
    assert twice.loc[("gpu", "n000", 2), "risk"] < 0.5
    # It stands while both remaps are within the hour, long after the XIDs' first minutes.
    # The model reads nothing there by now, so the lead is the remaps' own: 12 minutes.
    held, _ = step(T0 + 3.5 * 3600 + 1200)
    assert held.loc[("gpu", "n001", 3), "risk"] >= PolicyConfig().fire_now_at
    assert held.loc[("gpu", "n001", 3), "lead_s"] == 720.0
    # An hour after the first of the two, only one is left in the window: the lift is gone.
    later, _ = step(T0 + 4.05 * 3600)
    assert later.loc[("gpu", "n001", 3), "risk"] < 0.5
    assert not any(s.startswith("HBM rows") for s in later.loc[("gpu", "n001", 3), "signals"])


def test_a_weak_row_raising_xid_92_for_hours_is_let_go_and_a_ramp_is_not(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # n001/GPU 0: a weak HBM row erring at a steady 190 an hour, XID 92 every 50 minutes by the
    # driver's rule, for 12 hours, never failing (a held-out generator's weak rows read so: 14
    # of its false episodes). n002/GPU 3: an ECC ramp from 8 h with XID 63/92, failing at 11.5 h.
    weak = [(T0 + m * 60.0, "n001", 0, 92) for m in range(10, 720, 50)]
    trace = make_trace(Spec(nodes=4, hours=12.0, benign_sbe=("n001", 0), benign_sbe_per_h=190.0,
                            extra_events=weak, ecc_ramp=("n002", 3, 8.0, 11.5)))
    late = T0 + 9 * 3600

    def read(result) -> tuple[pd.DataFrame, pd.Series, pd.DataFrame]:
        alerts, tl = result.alerts, result.timeline
        return (alerts[(alerts["node"] == "n001") & (alerts["ts"] >= late)],
                tl[(tl["node"] == "n001") & (tl["ts"] > T0 + 6 * 3600)]["risk"],
                alerts[alerts["node"] == "n002"])

    weak_alerts, weak_risk, ramp = read(run(trace, RiskModel.load()))
    # Once its XIDs have come for hours on a rate that does not grow, they are read as its habit:
    # the alert raised in its first hour (two XIDs, no history yet) resolves and stays resolved.
    assert weak_alerts.empty
    assert (weak_risk < PolicyConfig().slow_at).mean() >= 0.7
    # The ramp still fires, well before its failure, at the top of the scale.
    assert not ramp.empty and ramp["ts"].min() <= T0 + 9.0 * 3600 and ramp["score"].max() >= 0.9
    # The model alone holds the weak row at risk all along.
    monkeypatch.setattr(scorer_module, "CHRONIC_XIDS", np.inf)
    weak_alerts, weak_risk, _ = read(run(trace, RiskModel.load()))
    assert not weak_alerts.empty and (weak_risk >= PolicyConfig().slow_at).mean() >= 0.9


def test_a_weak_risk_that_never_lets_go_fires_after_an_hour() -> None:
    config = PolicyConfig(slow_at=0.25, slow_persist_s=3600)
    held, dipped = AlertPolicy(config=config), AlertPolicy(config=config)
    fired_held, fired_dipped = [], []
    for i in range(14):  # 65 minutes of 5-min ticks, always below fire_at
        fired_held += [tr.action for tr in held.step(_frame([("a", 0, 0.3)]), T0 + 300 * i)]
        r = 0.2 if i == 7 else 0.3  # one tick below the slow lane restarts its clock
        fired_dipped += [tr.action for tr in dipped.step(_frame([("a", 0, r)]), T0 + 300 * i)]
    assert fired_held[:1] == ["fire"] and len(fired_held) == 2  # fired at 60 min, then updated
    assert fired_dipped == []
    off = AlertPolicy(config=PolicyConfig(slow_at=None))
    assert not any(off.step(_frame([("a", 0, 0.3)]), T0 + 300 * i) for i in range(30))


def test_a_risk_that_climbs_slowly_fires_on_the_middle_lane() -> None:
    # A short precursor: the risk stands at 0.4-0.5 for half an hour, under fire_at (0.55) and
    # far short of the slow lane's hour. It fires after 25 min in the middle lane, not after.
    climb = [0.4, 0.45, 0.45, 0.5, 0.5, 0.5, 0.5, 0.5]
    policy = AlertPolicy()
    fired = [(i, tr.action) for i, r in enumerate(climb)
             for tr in policy.step(_frame([("a", 0, r)]), T0 + 300 * i)]
    assert fired[0] == (5, "fire")  # 0, 5, ..., 25 min
    # Without the middle lane the same climb raises nothing in its 35 minutes ...
    off = AlertPolicy(config=PolicyConfig(mid_at=None))
    assert not any(off.step(_frame([("a", 0, r)]), T0 + 300 * i) for i, r in enumerate(climb))
    # ... and one tick under mid_at restarts the middle lane's clock (0.3: still the slow lane).
    dipped = AlertPolicy()
    dip = [0.4, 0.4, 0.4, 0.3, 0.4, 0.4, 0.4, 0.4, 0.4]
    assert not any(dipped.step(_frame([("a", 0, r)]), T0 + 300 * i) for i, r in enumerate(dip))
    with pytest.raises(ValueError, match="mid_at"):
        PolicyConfig(mid_at=1.2)
    with pytest.raises(ValueError, match="mid_persist_s"):
        PolicyConfig(mid_persist_s=-5.0)


def test_a_policy_on_a_faster_clock_acts_at_the_same_ticks() -> None:
    # The same course of risk on 5-min ticks under the service's policy, and on 2-s ticks under
    # that policy 150x faster (foreshock demo's): each lane fires, and the alert resolves, at
    # the same tick. Each node is driven to a different lane: slow, middle, quick, main.
    courses = {"slow": [0.3] * 14, "mid": [0.4] * 7, "quick": [0.7] * 4, "main": [0.6] * 5,
               "resolved": [0.95] + [0.05] * 8}

    def acts(config: PolicyConfig, tick_s: float) -> list[tuple[int, str, str]]:
        policy = AlertPolicy(config=config)
        n = max(len(c) for c in courses.values())
        return [(i, tr.node, tr.action) for i in range(n)
                for tr in policy.step(_frame([(node, 0, c[min(i, len(c) - 1)])
                                              for node, c in courses.items()]), T0 + tick_s * i)
                if tr.action != "update"]

    usual = acts(PolicyConfig(), 300.0)
    assert usual == acts(PolicyConfig().compressed(150.0), 2.0)
    assert [(i, node) for i, node, action in usual if action == "fire"] == [
        (0, "resolved"), (2, "quick"), (3, "main"), (5, "mid"), (12, "slow")]
    assert (7, "resolved", "resolve") in usual
    # On the faster clock without compression, nothing but the fire-at-once lane fires.
    assert [(node, a) for _, node, a in acts(PolicyConfig(), 2.0)] == [("resolved", "fire")]
    assert PolicyConfig().compressed(150.0).persist_s == 6.0
    with pytest.raises(ValueError, match="compression"):
        PolicyConfig().compressed(0.0)


def test_an_open_alert_keeps_the_signals_that_last_drove_it() -> None:
    # Risks under the explain threshold come with no signals; the alert, still open on its
    # hysteresis, must not go out to on-call as "top signals: none".
    policy = AlertPolicy(config=PolicyConfig(fire_at=0.5, fire_now_at=0.9, fire_now_hold_s=0.0,
                                             persist_s=600, resolve_below=0.1,
                                             resolve_after_s=900))
    frames = [(0.95, ("ECC single-bit errors 900/h over 5m",)),
              (0.7, ("ECC single-bit errors 400/h over 1h",)), (0.15, ()), (0.12, ())]
    seen = []
    for i, (risk, signals) in enumerate(frames):
        frame = _frame([("n1", 0, risk)]).assign(signals=[signals])
        seen += [(tr.action, tr.signals) for tr in policy.step(frame, T0 + 300 * i)]
    assert seen == [("fire", ("ECC single-bit errors 900/h over 5m",)),
                    ("update", ("ECC single-bit errors 400/h over 1h",)),
                    ("update", ("ECC single-bit errors 400/h over 1h",)),
                    ("update", ("ECC single-bit errors 400/h over 1h",))]


# A node of the fifth generator's fleet 2 (gpu-node-013, 6.75 h in): a straggler (step time 6.75 z
# over the job's) whose links read 3% slower than the fleet's all along, because that generator
# draws each pair of nodes its own speed. The shipped model read it at 0.85 on its link z and
# kept it in alert for 45 hours.
STRAGGLER_ON_SLOWISH_LINKS = {
    "step_z": 6.75, "compute_z": 0.67, "collective_z": 1.48, "step_trend_z": -3.3,
    "compute_trend_z": -2.85, "compute_z_6h": 1.86, "link_bw_med_z": -0.67,
    "link_bw_min_z": -0.74, "link_bw_trend_med_z": -0.08, "link_bw_trend_min_z": -0.15,
    "link_lat_med_z": 1.31, "link_lat_max_z": 2.59, "link_lat_trend_med_z": 1.16,
    "node_temp_dev": 1.15, "node_temp_trend_dev": -1.1, "step_z_held_1h": 0.67,
    "link_bw_med_z_held_1h": -0.65, "link_lat_med_z_held_1h": 0.51, "node_temp_dev_held_1h": 0.8}


@pytest.fixture(scope="module")
def quiet_fleet() -> tuple[Scorer, Features]:
    """The shipped model's scorer and a quiet 8-node fleet's features 3 hours in, built once for
    the tests that set one node's features by hand (neither is changed by scoring)."""
    engine = FeatureEngine(interval_s=30.0)
    t = T0 + 3 * 3600
    engine.update(make_trace(Spec(nodes=8, gpus=1, hours=3.0)), t)
    return Scorer(scorer_module.load_model(None)), engine.features(t)


def _node_risk(fleet: tuple[Scorer, Features], node: str, values: dict[str, float]) -> float:
    scorer, feats = fleet
    frame = feats.node.copy()
    for col, v in values.items():
        frame.loc[frame["node"] == node, col] = v
    risks = scorer.score(replace(feats, node=frame))
    return float(risks.loc[(risks["node"] == node) & (risks["kind"] == "node"), "risk"].iloc[0])


def test_links_a_few_percent_slower_than_the_fleets_are_not_read_as_a_failing_nic(
        quiet_fleet: tuple[Scorer, Features]) -> None:
    assert _node_risk(quiet_fleet, "n002", STRAGGLER_ON_SLOWISH_LINKS) < 0.25  # under every lane
    # The same straggler on links that really are slow (a NIC trained down to 60%) still alarms.
    slow = {**STRAGGLER_ON_SLOWISH_LINKS, "link_bw_med_z": -10.0, "link_bw_min_z": -11.0,
            "link_bw_med_z_held_1h": -10.0}
    assert _node_risk(quiet_fleet, "n002", slow) > 0.55


# A node of the fourth generator's fleet 4 (rk02-n03, 5.75 h in), healthy, whose links had read a
# little faster and sooner than the fleet's for the hour. With those readings zeroed as well, round
# 39's model read it 0.27 (its slow lane opens at 0.25) and it spent 34 hours of the trace in false
# node alerts. A model that reads it under the lane even zeroed fails the test below with the
# scorer right (round 43's candidate, not shipped: 0.248 zeroed, 0.14 as its links show).
HEALTHY_ON_BRISK_LINKS = {
    "step_z": 0.003, "compute_z": 0.674, "collective_z": -0.685, "step_trend_z": -0.003,
    "compute_trend_z": 0.012, "compute_z_6h": 0.674, "link_bw_med_z": -0.199,
    "link_bw_min_z": -0.576, "link_lat_med_z": -0.053, "link_lat_max_z": 1.538,
    "node_stale_intervals": 0.75, "node_temp_dev": 2.445, "node_temp_trend_dev": -0.545,
    "node_throttle_power_rise": 0.123, "node_power_cv_rise": -0.032, "fleet_hot_frac": 0.033,
    "fleet_bw_low_frac": 0.033, "hot_nodes_besides": 1.0, "slow_link_nodes_besides": 1.0,
    "slow_probes_elsewhere": 0.053, "step_z_held_1h": 0.001, "compute_z_held_1h": 0.674,
    "link_bw_med_z_held_1h": 0.584, "link_lat_med_z_held_1h": -0.768,
    "node_temp_dev_held_1h": 0.921}


def test_links_a_little_faster_than_the_fleets_still_count_for_the_node(
        quiet_fleet: tuple[Scorer, Features]) -> None:
    brisk = _node_risk(quiet_fleet, "n002", HEALTHY_ON_BRISK_LINKS)
    at_the_fleets = _node_risk(quiet_fleet, "n002", {**HEALTHY_ON_BRISK_LINKS,
                                                     "link_lat_med_z": 0.0,
                                                     "link_bw_med_z_held_1h": 0.0,
                                                     "link_lat_med_z_held_1h": 0.0})
    assert brisk < 0.25 <= at_the_fleets  # out of the slow lane only on what its links show


def test_the_link_dead_zone_zeroes_small_z_on_the_side_of_risk_and_leaves_the_rest() -> None:
    frame = pd.DataFrame({"node": ["a", "b", "c", "d"],
                          "link_bw_med_z": [-0.9, -1.0, np.nan, 0.9],
                          "link_lat_med_z": [0.3, 4.0, 0.0, -0.5],
                          "peer_bw_med_z": [0.5, -0.5, 2.0, -2.0], "step_z": [0.5] * 4})
    out = scorer_module.link_dead_zone(frame, {"link_bw_med_z": -1, "link_lat_med_z": 1,
                                               "peer_bw_med_z": 0, "absent": 1})
    # Slower and later within 1 z read as the fleet's; faster and sooner keep their reading.
    assert out["link_bw_med_z"].tolist()[:2] == [0.0, -1.0]
    assert np.isnan(out.loc[2, "link_bw_med_z"])
    assert out.loc[3, "link_bw_med_z"] == 0.9
    assert out["link_lat_med_z"].tolist() == [0.0, 4.0, 0.0, -0.5]
    assert out["peer_bw_med_z"].tolist() == [0.0, 0.0, 2.0, -2.0]  # no direction: both sides
    assert out["step_z"].tolist() == [0.5] * 4  # not a link feature
    assert frame.loc[0, "link_bw_med_z"] == -0.9  # the caller's frame is left as it was
