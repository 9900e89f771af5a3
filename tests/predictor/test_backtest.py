"""Backtests: no look-ahead, never reading failures.csv, alerts.csv format, CLI and plot."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from collector.fleet_trace import write_trace
from predictor.backtest import ALERT_COLUMNS, run, truncate
from predictor.model import RiskModel
from predictor.rules import RulesModel
from predictor.signals_absent import without
from tests.predictor.conftest import T0, Spec, make_trace

SPEC = Spec(seed=21, hours=8, ecc_ramp=("n001", 3, 3.0, 6.0), benign_sbe=("n002", 0),
            app_xids=10, extra_events=[(T0 + 7 * 3600, "n003", 1, 79)])


@pytest.mark.parametrize("which", ["model", "rules"])
def test_truncating_the_trace_leaves_earlier_alerts_unchanged(which: str,
                                                              tiny_model: RiskModel) -> None:
    model = tiny_model if which == "model" else RulesModel()
    trace = make_trace(SPEC)
    full = run(trace, model).alerts
    assert len(full)
    for hours in (4.0, 5.5, 7.2):
        cut_at = T0 + hours * 3600
        cut = run(truncate(trace, cut_at), model).alerts
        before = full[full["ts"] <= cut_at].reset_index(drop=True)
        pd.testing.assert_frame_equal(cut[cut["ts"] <= cut_at].reset_index(drop=True), before)


def test_model_alerts_before_the_failure_and_not_on_confounders(tiny_model: RiskModel) -> None:
    alerts = run(make_trace(SPEC), tiny_model).alerts
    fail_ts = T0 + 6 * 3600
    early = alerts[(alerts["node"] == "n001") & (alerts["ts"] <= fail_ts - 60)]
    assert len(early) and (early["gpu"] == 3).all()
    assert fail_ts - early["ts"].min() >= 1800
    assert "n002" not in set(alerts["node"])  # the steady benign SBE GPU


def test_cli_backtest_writes_alerts_csv_and_plot_without_reading_failures(
        tmp_path: Path, cli: typer.Typer) -> None:
    trace = make_trace(SPEC)
    root = tmp_path / "trace"
    write_trace(root, trace)
    (root / "failures.csv").write_text("garbage that a backtest must never parse\n\x00")
    out, png = tmp_path / "alerts.csv", tmp_path / "risk.png"
    res = CliRunner().invoke(cli, ["backtest", str(root), "--alerts-out", str(out),
                                   "--model", "rules", "--plot", str(png)])
    assert res.exit_code == 0, res.output
    alerts = pd.read_csv(out, dtype={"gpu": "Int64"})
    assert tuple(alerts.columns) == ALERT_COLUMNS
    assert alerts["kind"].isin(["gpu", "node", "link"]).all()
    assert alerts["ts"].between(trace.meta.start, trace.meta.end).all()
    assert alerts["lead_s"].isna().all()  # a threshold gives no estimate of when
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_cli_backtest_says_what_a_trace_does_not_export_before_its_figures(
        tmp_path: Path, cli: typer.Typer) -> None:
    # A user's own DCGM history often has no XID log and no training hook: the backtest's
    # alerts then read less than the model can, and the user is told which signal is missing.
    full, bare, stepped = tmp_path / "full", tmp_path / "bare", tmp_path / "stepped"
    trace = make_trace(Spec(seed=21, hours=2))
    write_trace(full, trace)
    write_trace(bare, without(trace, ["events", "node", "latency", "ecc", "nvlink", "throttle"]))
    write_trace(stepped, without(trace, ["compute"]))  # a hook that reports step times only
    said = {}
    for root in (full, bare, stepped):
        res = CliRunner().invoke(cli, ["backtest", str(root), "--alerts-out",
                                       str(tmp_path / f"{root.name}.csv"), "--model", "rules"])
        assert res.exit_code == 0, res.output
        said[root.name] = res.output
    assert "note:" not in said["full"]
    assert "no events.csv: XID counts read as unknown" in said["bare"]
    assert "no node.csv" in said["bare"] and "no net.link.latency" in said["bare"]
    assert "no gpu.ecc.sbe or gpu.ecc.dbe (dcgm-exporter's default counters" in said["bare"]
    assert "no gpu.nvlink.crc_errors" in said["bare"]
    assert "no gpu.throttle.thermal or gpu.throttle.power" in said["bare"]
    assert "no train.compute.duration" in said["stepped"] and "no node.csv" not in said["stepped"]
    assert "no links.csv" not in said["bare"]


def test_cli_backtest_fire_at_trades_lead_for_fewer_alerts(tmp_path: Path, cli: typer.Typer,
                                                           tiny_model: RiskModel) -> None:
    root, model = tmp_path / "trace", tmp_path / "m.skops"
    write_trace(root, make_trace(SPEC))
    tiny_model.save(model)
    first: dict[str, float] = {}
    rows: dict[str, int] = {}
    for label, extra in (("default", []), ("strict", ["--fire-at", "0.95"])):
        out = tmp_path / f"{label}.csv"
        res = CliRunner().invoke(cli, ["backtest", str(root), "--alerts-out", str(out),
                                       "--model", str(model), *extra])
        assert res.exit_code == 0, res.output
        alerts = pd.read_csv(out)
        rows[label] = len(alerts)
        first[label] = alerts.loc[alerts["node"] == "n001", "ts"].min()
        # Every row before the failure says how long the model expects (after it the node is
        # scored as failed, with no estimate).
        assert (alerts.loc[alerts["ts"] < T0 + 6 * 3600, "lead_s"] > 0).all()
    # evaluate holds the estimate at the first alert against the lead the failure gave.
    res = CliRunner().invoke(cli, ["evaluate", str(root), "--alerts",
                                   str(tmp_path / "default.csv")])
    assert res.exit_code == 0, res.output
    assert "lead estimate, times off" in res.output and "1 caught failures with an" in res.output
    # The ECC ramp on n001 still alerts under the stricter threshold, an hour later.
    assert first["default"] < first["strict"] <= T0 + 6 * 3600 - 60
    assert rows["strict"] < rows["default"]
    res = CliRunner().invoke(cli, ["backtest", str(root), "--alerts-out", str(tmp_path / "x.csv"),
                                   "--fire-at", "1.5"])
    assert res.exit_code != 0 and "--fire-at" in res.output
    res = CliRunner().invoke(cli, ["backtest", str(root), "--alerts-out", str(tmp_path / "x.csv"),
                                   "--every", "0"])
    assert res.exit_code != 0 and "'--every'" in res.output and "> 0 seconds" in res.output
    assert "Traceback" not in res.output and not (tmp_path / "x.csv").exists()


def test_cli_refuses_an_output_it_cannot_write_before_any_work(tmp_path: Path,
                                                              cli: typer.Typer) -> None:
    # A backtest or a fit runs for minutes: a --plot, --alerts-out or --out it cannot write
    # must stop it at the start with the option named, not end it in a traceback.
    root = tmp_path / "trace"
    write_trace(root, make_trace(SPEC))
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    for args, option in (
            (["backtest", str(root), "--alerts-out", str(tmp_path)], "'--alerts-out'"),
            (["backtest", str(root), "--alerts-out", str(tmp_path / "a.csv"), "--plot",
              str(blocked / "risk.png")], "'--plot'"),
            (["model", "fit", str(root), "--out", str(blocked / "m.skops")], "'--out'")):
        res = CliRunner().invoke(cli, args)  # a failed write after the work would exit 1
        assert res.exit_code == 2 and option in res.output, res.output
        assert "Traceback" not in res.output
    assert not (tmp_path / "a.csv").exists()
    # A folder that is not there yet is made.
    res = CliRunner().invoke(cli, ["backtest", str(root), "--model", "rules", "--alerts-out",
                                   str(tmp_path / "new" / "alerts.csv")])
    assert res.exit_code == 0 and (tmp_path / "new" / "alerts.csv").is_file()


def test_cli_model_fit_average_then_backtest_with_it(tmp_path: Path, cli: typer.Typer) -> None:
    dirs = []
    for s in range(3):
        root = tmp_path / f"t{s}"
        write_trace(root, make_trace(Spec(seed=s, hours=6, ecc_ramp=("n001", s, 3.0, 5.5))))
        dirs.append(str(root))
    models = [tmp_path / "m0.skops", tmp_path / "m1.skops"]
    for seed, model in enumerate(models):
        # The second one also learns remaps and memory XIDs on their own.
        res = CliRunner().invoke(cli, ["model", "fit", *dirs, "--out", str(model),
                                       "--seed", str(seed), *["--events-alone"][:seed]])
        assert res.exit_code == 0, res.output
    both = tmp_path / "both.skops"
    res = CliRunner().invoke(cli, ["model", "average", *map(str, models), "--out", str(both)])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(cli, ["model", "info", str(both)])
    assert res.exit_code == 0 and "gpu: " in res.output and "average of 2" in res.output
    assert "lead from " in res.output  # regressors, or the table where too few rows
    res = CliRunner().invoke(cli, ["backtest", dirs[0], "--alerts-out",
                                   str(tmp_path / "a.csv"), "--model", str(both)])
    assert res.exit_code == 0, res.output
    assert len(pd.read_csv(tmp_path / "a.csv")) > 0  # the ramp of n001 is flagged
    # One model is not an average, and a model that cannot be read is named.
    res = CliRunner().invoke(cli, ["model", "average", str(models[0]), "--out", str(both)])
    assert res.exit_code != 0 and "two models or more" in res.output
    res = CliRunner().invoke(cli, ["model", "average", str(models[0]), dirs[1], "--out",
                                   str(both)])
    assert res.exit_code != 0 and "t1" in res.output
    # A lead quantile outside (0, 1) is refused before any trace is replayed, naming the option.
    res = CliRunner().invoke(cli, ["model", "fit", *dirs, "--out", str(tmp_path / "q.skops"),
                                   "--lead-quantile", "1.5"])
    assert res.exit_code != 0 and "--lead-quantile" in res.output and "1.5" in res.output
    assert not (tmp_path / "q.skops").exists()


def test_cli_refuses_a_broken_trace_naming_file_and_column(tmp_path: Path,
                                                           cli: typer.Typer) -> None:
    root = tmp_path / "trace"
    write_trace(root, make_trace(Spec(hours=1)))
    pd.DataFrame({"ts": [T0], "gpu": [0]}).to_csv(root / "gpu.csv.gz", index=False)
    res = CliRunner().invoke(cli, ["backtest", str(root), "--alerts-out",
                                   str(tmp_path / "a.csv"), "--model", "rules"])
    assert res.exit_code != 0
    text = "".join(ch for ch in res.output if ch.isascii() and not ch.isspace())
    assert "gpu.csv.gz" in text and "missingrequiredcolumn(s)node" in text


def test_out_of_order_rows_give_the_same_alerts() -> None:
    trace = make_trace(SPEC)
    shuffled = type(trace)(meta=trace.meta, gpu=trace.gpu.sample(frac=1.0, random_state=1),
                           node=trace.node.sample(frac=1.0, random_state=2), links=trace.links,
                           events=trace.events.iloc[::-1])
    pd.testing.assert_frame_equal(run(shuffled, RulesModel()).alerts,
                                  run(trace, RulesModel()).alerts)


@pytest.mark.parametrize("lost_as", [float("inf"), float(2**47)])
def test_cli_backtest_reads_past_values_no_sensor_reads(tmp_path: Path, cli: typer.Typer,
                                                        lost_as: float) -> None:
    # A few lost readings written as inf, or as DCGM's blank for a float field (2**47), 1 in 100
    # temperatures, once made the shipped model alert on every node of a healthy fleet (116
    # alert rows here for the blank); read as missing, they change no alert.
    clean, lossy = tmp_path / "clean", tmp_path / "lossy"
    trace = make_trace(Spec(seed=21, hours=3))
    write_trace(clean, trace)
    gpu = trace.gpu.copy()
    lost = np.random.default_rng(0).random(len(gpu)) < 0.01
    gpu.loc[lost, "gpu.temperature"] = lost_as
    write_trace(lossy, type(trace)(meta=trace.meta, gpu=gpu, node=trace.node, links=trace.links,
                                   events=trace.events))
    alerts = {}
    for root in (clean, lossy):
        out = tmp_path / f"{root.name}.csv"
        res = CliRunner().invoke(cli, ["backtest", str(root), "--alerts-out", str(out)])
        assert res.exit_code == 0, res.output
        alerts[root.name] = pd.read_csv(out)
    assert len(alerts["clean"]) == 0
    pd.testing.assert_frame_equal(alerts["lossy"], alerts["clean"])


@pytest.mark.parametrize("every", ["nan", "inf"])
def test_cli_backtest_refuses_a_period_that_is_no_number_of_seconds(
        tmp_path: Path, cli: typer.Typer, every: str) -> None:
    root = tmp_path / "trace"
    write_trace(root, make_trace(Spec(hours=1)))
    res = CliRunner().invoke(cli, ["backtest", str(root), "--alerts-out", str(tmp_path / "a.csv"),
                                   "--model", "rules", "--every", every])
    assert res.exit_code == 2, res.output  # was a traceback: "arange: cannot compute length"
    assert "'--every'" in res.output and every in res.output
    assert not (tmp_path / "a.csv").exists()
