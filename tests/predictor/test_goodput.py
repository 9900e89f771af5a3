"""Goodput: alerts priced in training time (predictor/goodput.py, ``foreshock goodput``)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from collector.fleet_trace import FleetTrace, write_trace
from predictor import cli_data
from predictor.goodput import (
    ORACLE,
    REACTIVE,
    GoodputConfig,
    compare,
    drains,
    failure_scale,
    rescaled,
)
from tests.predictor.test_evaluate import T0, H, _alerts, _trace

# Four nodes of 8 GPUs for a day: one job of 32 GPUs, 768 GPU-hours.
A, B, C = T0 + 6 * H, T0 + 12 * H, T0 + 18 * H


def _case() -> tuple[FleetTrace, pd.DataFrame]:
    # A: a GPU with an hour's precursor, alerted 40 min ahead. B: a node that dies with no
    # precursor. C: a GPU with a 30-min precursor, alerted 30 s ahead (too late to drain).
    # n3 raises a false alarm.
    trace = _trace([(A, "n0", 2, "gpu", H), (B, "n1", -1, "node", 0.0),
                    (C, "n2", 5, "gpu", 1800.0)], days=1.0)
    alerts = _alerts([(A - 2400, "n0", 2, "gpu"), (C - 30, "n2", 5, "gpu"),
                      (T0 + 3 * H, "n3", 1, "gpu")])
    return trace, alerts


def test_each_outcome_costs_what_it_does_to_one_job_across_the_fleet() -> None:
    trace, alerts = _case()
    config = GoodputConfig()
    none, model, bound = compare(trace, {"model": alerts}, config)
    assert [r.label for r in (none, model, bound)] == [REACTIVE, "model", ORACLE]
    gpus, node = 32, 8
    assert none.total_gpu_h == gpus * 24
    # No warning: each of the three failures loses half a checkpoint period and a restart.
    unwarned = gpus * (config.checkpoint_every_s / 2 + config.restart_s) / 3600
    assert none.lost == pytest.approx(3 * unwarned)
    assert none.goodput == pytest.approx(1 - 3 * unwarned / (gpus * 24))
    # The model drains A 40 min ahead (the node sits those 40 min out), misses B and C (30 s
    # is too late), and drains healthy n3 for an hour.
    drain = gpus * (config.checkpoint_s + config.drain_s) / 3600
    assert (model.caught, model.false_drains) == (1, 1)
    assert model.lost_gpu_h["rollback"] + model.lost_gpu_h["restart"] == pytest.approx(
        2 * unwarned)
    assert model.lost_gpu_h["drain"] == pytest.approx(drain)
    assert model.lost_gpu_h["early drain"] == pytest.approx(node * 2400 / 3600)
    assert model.lost_gpu_h["false drain"] == pytest.approx(
        drain + node * config.false_drain_out_s / 3600)
    # The bound foresees A and C with the least lead a drain needs; B still comes unwarned.
    assert bound.caught == 2 and bound.lost == pytest.approx(
        unwarned + 2 * drain + 2 * node * 60 / 3600)
    # One catch does not pay for one healthy node out for an hour on a job this small.
    assert model.goodput < none.goodput < bound.goodput


def test_a_storm_of_false_alarms_costs_more_than_no_prediction() -> None:
    # Threshold rules that stand on every node: every failure caught, and a healthy node drained
    # every half hour. The alerts "catch" all but cost more training time than they save.
    trace, _ = _case()
    storm = _alerts([(T0 + k * 1800.0 + 60, f"n{k % 4}", 0, "gpu") for k in range(48)])
    every_time = GoodputConfig(drains_per_hour=99, drain_again_after_s=0)
    none, rules, _ = compare(trace, {"rules": storm}, every_time)
    assert rules.caught == 3 and rules.false_drains > 20
    assert rules.goodput < none.goodput
    # Where a node drains again no sooner than 6 h after its last drain (the service's default),
    # healthy n3, alerting every 2 h, drains every 6 h: the storm costs less, and still more than
    # it saves.
    waited = GoodputConfig(drains_per_hour=99)
    taken = drains(storm, waited, trace.failures)
    assert list(taken.loc[taken["node"] == "n3", "ts"] - (T0 + 5460)) == [0, 6 * H, 12 * H, 18 * H]
    fewer = compare(trace, {"rules": storm}, waited)[1]
    assert fewer.caught == 3 and fewer.false_drains < rules.false_drains
    assert rules.goodput < fewer.goodput < none.goodput


def test_failures_scaled_to_a_real_rate_leave_false_drains_as_they_were() -> None:
    # The case holds 3 failures in 4 node-days (750 per 1,000); a real fleet has about 4.2.
    trace, alerts = _case()
    none, model, _ = compare(trace, {"model": alerts}, GoodputConfig())
    scale = failure_scale([trace], 4.2)
    assert scale == pytest.approx(4.2 / 750)
    real_none, real_model = rescaled(none, scale), rescaled(model, scale)
    assert real_none.lost == pytest.approx(none.lost * scale)
    assert real_model.lost_gpu_h["false drain"] == model.lost_gpu_h["false drain"]
    assert real_model.lost_gpu_h["rollback"] == pytest.approx(model.lost_gpu_h["rollback"] * scale)
    # One false alarm now costs many times what the rarer catches save.
    assert none.goodput - model.goodput < real_none.goodput - real_model.goodput


def _risky(rows: list[tuple[float, str, float]]) -> pd.DataFrame:
    """Alert rows on GPU 0 of each node with the given risks."""
    frame = _alerts([(ts, node, 0, "gpu") for ts, node, _ in rows])
    return frame.assign(score=[risk for _, _, risk in rows])


def test_only_alerts_that_the_service_would_drain_on_cost_or_save() -> None:
    # The service drains at a firing alert's risk of 0.5 (FORESHOCK_DRAIN_RISK_THRESHOLD).
    # A is alerted from 40 min ahead at 0.4 and reaches 0.6 20 min ahead; C's alerts never
    # reach 0.5; n3's false alarm stands at 0.45 and drains no one.
    trace, _ = _case()
    alerts = _risky([(A - 2400 + k * 300, "n0", 0.6 if k >= 4 else 0.4) for k in range(8)]
                    + [(C - 1500 + k * 300, "n2", 0.45) for k in range(5)]
                    + [(T0 + 3 * H + k * 300, "n3", 0.45) for k in range(6)])
    config = GoodputConfig()
    model = compare(trace, {"model": alerts}, config)[1]
    gpus, node = 32, 8
    unwarned = gpus * (config.checkpoint_every_s / 2 + config.restart_s) / 3600
    assert (model.caught, model.false_drains) == (1, 0)
    assert model.lost_gpu_h["early drain"] == pytest.approx(node * 1200 / 3600)  # from 0.6 on
    assert model.lost_gpu_h["rollback"] + model.lost_gpu_h["restart"] == pytest.approx(
        2 * unwarned)  # B, and C whose alerts stayed below the line
    # Drained at every alert, C is caught 25 min ahead and n3 drained for nothing.
    every = compare(trace, {"model": alerts}, dataclasses.replace(config, drain_at=0.0))[1]
    assert (every.caught, every.false_drains) == (2, 1)
    assert every.lost_gpu_h["early drain"] == pytest.approx(node * (2400 + 1500) / 3600)


def test_no_more_drains_an_hour_than_the_service_allows() -> None:
    # Three healthy nodes alert at once at 0.9; with two drains an hour the third is held, and
    # drains once the hour allows if its episode still stands then (n2's does, n3's has ended).
    trace, _ = _case()
    start = T0 + 2 * H
    alerts = _risky([(start, "n0", 0.9), (start + 60, "n1", 0.9)]
                    + [(start + 120 + k * 300, "n2", 0.9) for k in range(14)]
                    + [(start + 7 * H + k * 300, "n3", 0.9) for k in range(2)]
                    + [(start + 7 * H + 60, "n0", 0.9), (start + 7 * H + 120, "n1", 0.9)])
    taken = drains(alerts, GoodputConfig())
    assert list(zip(taken["node"], taken["ts"] - start, strict=True)) == [
        ("n0", 0), ("n1", 60), ("n2", 3720), ("n3", 7 * H), ("n0", 7 * H + 60)]
    assert len(drains(alerts, GoodputConfig(drains_per_hour=0))) == 0
    # Uncapped, n2 drains at once, and again when back from its hour out, its episode standing,
    # if the service drains a returned node again at once.
    uncapped = drains(alerts, GoodputConfig(drains_per_hour=99, drain_again_after_s=0))
    assert list(uncapped.loc[uncapped["node"] == "n2", "ts"] - start) == [120, 3720]
    assert len(uncapped) == 7
    assert len(drains(alerts, GoodputConfig(drains_per_hour=99))) == 6  # it waits 6 h: once
    # n0's first drain comes 4 h before A fails there; the other four drain healthy nodes, and
    # n1's held alert 3 h before B is no catch.
    priced = compare(trace, {"a": alerts}, GoodputConfig())[1]
    assert (priced.caught, priced.false_drains) == (1, 4)


def test_a_node_back_from_a_drain_with_its_alert_still_standing_drains_again() -> None:
    # The service drains a node, sees it go silent and resolves its alert; an hour on it is back
    # and alerts anew, and drains again once 6 h have passed since its last drain, until a drain
    # comes within 6 h of its failure: then it is out until it fails. n0 alerts at 0.9 from 7 h
    # 50 min before its GPU fails to 15 min after (a failed node is out for repair), n3
    # (healthy) for 3 h 10 min.
    fail = T0 + 12 * H
    trace = _trace([(fail, "n0", 0, "gpu", 8 * H)], days=1.0)
    first = fail - 7 * H - 3000
    alerts = _risky([(t, "n0", 0.9) for t in range(int(first), int(fail) + 900, 300)]
                    + [(T0 + 14 * H + k * 300, "n3", 0.9) for k in range(39)])
    config = GoodputConfig()
    taken = drains(alerts, config, trace.failures)
    assert list(taken.loc[taken["node"] == "n0", "ts"] - first) == [0, 6 * H]
    assert list(taken.loc[taken["node"] == "n3", "ts"] - (T0 + 14 * H)) == [0]
    # n0's first drain, 7 h 50 min ahead, is false; the second catches its failure 1 h 50 min
    # ahead, one drain paid for and the node out from then on. n3 drains once.
    priced = compare(trace, {"a": alerts}, config)[1]
    assert (priced.caught, priced.false_drains) == (1, 1 + 1)
    gpus, node = 32, 8
    drain = gpus * (config.checkpoint_s + config.drain_s) / 3600
    assert priced.lost_gpu_h["drain"] == pytest.approx(drain)
    assert priced.lost_gpu_h["early drain"] == pytest.approx(node * (1 + 50 / 60))
    assert priced.lost_gpu_h["rollback"] == 0
    # Drained again as soon as it is back, n0 drains every hour until a drain comes within 6 h
    # of its failure, 5 h 50 min ahead, and n3 drains every hour it alerts.
    hourly = dataclasses.replace(config, drain_again_after_s=0)
    taken = drains(alerts, hourly, trace.failures)
    assert list(taken.loc[taken["node"] == "n0", "ts"] - first) == [0, H, 2 * H]
    assert list(taken.loc[taken["node"] == "n3", "ts"] - (T0 + 14 * H)) == [0, H, 2 * H, 3 * H]
    priced = compare(trace, {"a": alerts}, hourly)[1]
    assert (priced.caught, priced.false_drains) == (1, 2 + 4)
    assert priced.lost_gpu_h["early drain"] == pytest.approx(node * (5 + 50 / 60))
    # Out for 3 h, n0 drains once too early and once in time, and n3 twice.
    longer = drains(alerts, dataclasses.replace(hourly, false_drain_out_s=3 * H), trace.failures)
    assert list(longer["node"]) == ["n0", "n0", "n3", "n3"]
    # Nothing said of failures, every drained node comes back: n0 drains every hour it alerts,
    # or every 6 h with the service's wait.
    assert list(drains(alerts, hourly)["node"]).count("n0") == 9
    unknown = drains(alerts, config)
    assert list(unknown.loc[unknown["node"] == "n0", "ts"] - first) == [0, 6 * H]


def test_the_drain_policy_defaults_are_the_services() -> None:
    from api.decision_state import DrainPolicy
    from api.settings import Settings

    fields = Settings.model_fields
    assert GoodputConfig().drain_at == fields["drain_risk_threshold"].default
    assert GoodputConfig().drains_per_hour == fields["drain_max_per_hour"].default
    assert GoodputConfig().drain_again_after_s == fields["drain_again_after_s"].default
    assert GoodputConfig().drain_again_after_s == DrainPolicy().drain_again_after_s


def test_a_config_that_cannot_be_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="restart_s=-1"):
        GoodputConfig(restart_s=-1)
    with pytest.raises(ValueError, match="checkpoint_every_s=0"):
        GoodputConfig(checkpoint_every_s=0)
    with pytest.raises(ValueError, match=r"drain_at=1\.5"):
        GoodputConfig(drain_at=1.5)
    with pytest.raises(ValueError, match="drains_per_hour=-1"):
        GoodputConfig(drains_per_hour=-1)
    with pytest.raises(ValueError, match="drain_again_after_s=-1"):
        GoodputConfig(drain_again_after_s=-1)


@pytest.fixture
def app() -> typer.Typer:
    app = typer.Typer()
    cli_data.register(app)
    return app


def test_cli_compares_alert_sets_in_a_table_json_and_a_plot(app: typer.Typer,
                                                          tmp_path: Path) -> None:
    trace, alerts = _case()
    write_trace(tmp_path / "trace", trace)
    alerts.iloc[:1].to_csv(tmp_path / "model.csv", index=False)  # A's alert alone
    _alerts([(T0 + k * 1800.0 + 60, f"n{k % 4}", 0, "gpu") for k in range(48)]).to_csv(
        tmp_path / "rules.csv", index=False)
    args = ["goodput", str(tmp_path / "trace"), "--alerts", str(tmp_path / "model.csv"),
            "--alerts", f"threshold rules={tmp_path / 'rules.csv'}"]
    done = CliRunner(env={"COLUMNS": "120"}).invoke(
        app, [*args, "--plot", str(tmp_path / "goodput.png")])
    assert done.exit_code == 0, done.output
    for label in (REACTIVE, "model", "threshold rules", ORACLE, "healthy nodes drained"):
        assert label in done.output
    png = (tmp_path / "goodput.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    as_json = json.loads(CliRunner().invoke(app, [*args, "--json", "--restart", "1200"]).stdout)
    assert as_json["config"]["restart_s"] == 1200
    figures = {s["label"]: s for s in as_json["scenarios"]}
    assert figures["model"]["goodput"] > figures[REACTIVE]["goodput"] > figures[
        "threshold rules"]["goodput"]
    # Each node drains every 6 h at most, four times in the day: 16 drains, 3 of them catches.
    assert figures["model"]["caught"] == 1 and figures["threshold rules"]["false_drains"] == 13
    # A node drained again as soon as it is back: the rules' standing alarms drain more.
    at_once = json.loads(CliRunner().invoke(
        app, [*args, "--json", "--restart", "1200", "--drain-again-after", "0"]).stdout)
    assert at_once["config"]["drain_again_after_s"] == 0
    assert at_once["scenarios"][2]["false_drains"] > 20
    assert at_once["scenarios"][2]["false_drains"] > figures["threshold rules"]["false_drains"]
    assert "at most 2 an hour" in " ".join(done.output.split())
    # Every alert here reads 0.9: a service that drains from 0.95 only alerts, and loses what
    # no prediction loses.
    strict = json.loads(CliRunner().invoke(
        app, [*args, "--json", "--restart", "1200", "--drain-at", "0.95"]).stdout)
    assert strict["config"]["drain_at"] == 0.95
    assert [s["goodput"] for s in strict["scenarios"][:3]] == [figures[REACTIVE]["goodput"]] * 3
    real = json.loads(CliRunner().invoke(
        app, [*args, "--json", "--restart", "1200", "--failure-rate", "4.2"]).stdout)
    assert real["failures_per_1000_node_days"] == 4.2
    scaled = {s["label"]: s for s in real["scenarios"]}
    assert scaled[REACTIVE]["lost_gpu_h"] == pytest.approx(
        figures[REACTIVE]["lost_gpu_h"] * 4.2 / 750)
    assert scaled["threshold rules"]["lost_by_cause_gpu_h"]["false drain"] == figures[
        "threshold rules"]["lost_by_cause_gpu_h"]["false drain"]


def test_cli_names_what_is_wrong_with_its_input(app: typer.Typer, tmp_path: Path) -> None:
    trace, alerts = _case()
    write_trace(tmp_path / "trace", trace)
    alerts.to_csv(tmp_path / "a.csv", index=False)
    runner = CliRunner()
    same = runner.invoke(app, ["goodput", str(tmp_path / "trace"), "--alerts",
                               str(tmp_path / "a.csv"), "--alerts", f"a={tmp_path / 'a.csv'}"])
    assert same.exit_code == 2 and "repeat" in same.output
    missing = runner.invoke(app, ["goodput", str(tmp_path / "trace"), "--alerts",
                                  str(tmp_path / "nope.csv")])
    assert missing.exit_code == 2 and "nope.csv" in missing.output
    (tmp_path / "a-file").write_text("")
    unwritable = runner.invoke(app, ["goodput", str(tmp_path / "trace"), "--alerts",
                                     str(tmp_path / "a.csv"), "--plot",
                                     str(tmp_path / "a-file" / "goodput.png")])
    assert unwritable.exit_code == 2 and "'--plot'" in unwritable.output
    bad = runner.invoke(app, ["goodput", str(tmp_path / "trace"), "--alerts",
                              str(tmp_path / "a.csv"), "--drain", "-5"])
    assert bad.exit_code == 2 and "drain_s=-5" in " ".join(bad.output.split())
    endless = runner.invoke(app, ["goodput", str(tmp_path / "trace"), "--alerts",
                                  str(tmp_path / "a.csv"), "--failure-rate", "inf"])
    assert endless.exit_code == 2 and "--failure-rate" in endless.output  # was goodput nan%
    unlabelled = tmp_path / "unlabelled"
    write_trace(unlabelled, dataclasses.replace(trace, failures=None))
    no_truth = runner.invoke(app, ["goodput", str(unlabelled), "--alerts",
                                   str(tmp_path / "a.csv")])
    assert no_truth.exit_code == 2 and "failures.csv" in no_truth.output
