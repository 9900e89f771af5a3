"""``foreshock generate-trace`` and ``foreshock evaluate`` end to end through the CLI."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from collector.fleet_trace import read_trace
from predictor import cli_data

SMALL = ["--nodes", "6", "--gpus", "2", "--days", "0.5", "--interval", "60"]


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    app = typer.Typer()
    cli_data.register(app)
    return app


@pytest.fixture(scope="module")
def trace_dir(app: typer.Typer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cli") / "trace"
    result = CliRunner().invoke(app, ["generate-trace", str(out), "--seed", "7", *SMALL,
                                      "--failure-count", "3", "--repair-scale", "0.05",
                                      "--mix", "ecc=1,nic=1", "--precursor-share", "ecc=1,nic=1",
                                      "--set", "stalls_per_day=4"])
    assert result.exit_code == 0, result.output
    assert "3 failures" in result.output
    return out


def test_generate_trace_writes_a_readable_labelled_trace(trace_dir: Path) -> None:
    trace = read_trace(trace_dir, with_failures=True)
    assert len(trace.meta.nodes) == 6 and trace.meta.gpus_per_node == 2
    assert trace.failures is not None and len(trace.failures) == 3
    assert set(trace.failures["kind"]) <= {"gpu", "link"}
    assert (trace.failures["precursor_s"] > 0).all()
    meta = json.loads((trace_dir / "meta.json").read_text())
    assert meta["generator"]["seed"] == 7 and meta["generator"]["stalls_per_day"] == 4.0


def test_evaluate_round_trip(app: typer.Typer, trace_dir: Path, tmp_path: Path) -> None:
    failures = pd.read_csv(trace_dir / "failures.csv")
    alerts = pd.DataFrame({"ts": failures["ts"] - 1800, "node": failures["node"],
                           "gpu": failures["gpu"], "kind": failures["kind"], "score": 0.9,
                           "reason": "sbe rate"})
    alerts.to_csv(tmp_path / "alerts.csv", index=False)
    result = CliRunner().invoke(app, ["evaluate", str(trace_dir), "--alerts",
                                      str(tmp_path / "alerts.csv"), "--json"])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output)
    assert figures["recall"] == 1.0 and figures["precision"] == 1.0
    assert figures["median_lead_s"] == pytest.approx(1800.0)
    table = CliRunner().invoke(app, ["evaluate", str(trace_dir), "--alerts",
                                     str(tmp_path / "alerts.csv")])
    assert table.exit_code == 0 and "recall (with a precursor)" in table.output
    # Every alert came 30 min ahead: each precursor length present shows all of its caught.
    lengths = pd.cut(failures["precursor_s"], [0, 1800, 7200, np.inf], right=False,
                     labels=["< 30 min", "30 min-2 h", ">= 2 h"]).value_counts()
    assert lengths.sum() == 3
    for band, n in lengths.items():
        assert (f"precursor {band}" in table.output) == (n > 0)
        assert n == 0 or f"{n}/{n}" in table.output


def test_evaluate_details_list_misses_and_false_episodes(app: typer.Typer, trace_dir: Path,
                                                         tmp_path: Path) -> None:
    failures = pd.read_csv(trace_dir / "failures.csv").sort_values("ts")
    caught, missed = failures.iloc[0], failures.iloc[1]
    healthy = sorted(set(read_trace(trace_dir).meta.nodes) - set(failures["node"]))[0]
    alerts = tmp_path / "alerts.csv"
    pd.DataFrame({"ts": [caught["ts"] - 1800, failures["ts"].min()], "node": [caught["node"],
                  healthy], "gpu": [caught["gpu"], None], "kind": [caught["kind"], "node"],
                  "score": [0.81, 0.66], "reason": "x"}).to_csv(alerts, index=False)
    result = CliRunner(env={"COLUMNS": "120"}).invoke(
        app, ["evaluate", str(trace_dir), "--alerts", str(alerts), "--details"])
    assert result.exit_code == 0, result.output
    assert "Failures: 1 of 3 caught" in result.output
    assert result.output.count("missed") == 2 and "30 min" in result.output
    rows = {line.split()[2]: line for line in result.output.splitlines()
            if line.strip().startswith(("0", "1")) and len(line.split()) > 3}
    assert "missed" in rows[missed["node"]] and "0.81" in rows[caught["node"]]
    assert "1 of 2" in result.output and "false" in rows[healthy] and "0.66" in rows[healthy]
    as_json = json.loads(CliRunner().invoke(app, ["evaluate", str(trace_dir), "--alerts",
                                                  str(alerts), "--details", "--json"]).output)
    assert as_json["recall"] == pytest.approx(1 / 3)
    assert [f["caught"] for f in as_json["failures"]] == [True, False, False]
    assert as_json["failures"][1]["lead_s"] is None
    assert [e["verdict"] for e in as_json["episodes"]] == ["true", "false"]  # by start


def test_evaluate_refuses_malformed_alerts(app: typer.Typer, trace_dir: Path,
                                           tmp_path: Path) -> None:
    bad = tmp_path / "alerts.csv"
    bad.write_text("ts,node,gpu,kind,score,reason\nyesterday,node000,,node,0.5,x\n")
    result = CliRunner().invoke(app, ["evaluate", str(trace_dir), "--alerts", str(bad)])
    assert result.exit_code == 2
    assert "alerts.csv" in result.output and "'ts'" in result.output


def test_evaluate_refuses_broken_traces(app: typer.Typer, trace_dir: Path,
                                        tmp_path: Path) -> None:
    alerts = tmp_path / "alerts.csv"
    alerts.write_text("ts,node,gpu,kind,score,reason\n")
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("meta.json", "gpu.csv.gz"):
        (broken / name).write_bytes((trace_dir / name).read_bytes())
    result = CliRunner().invoke(app, ["evaluate", str(broken), "--alerts", str(alerts)])
    assert result.exit_code == 2 and "failures.csv" in result.output
    (broken / "failures.csv").write_text("ts,node,gpu,kind,precursor_s\n1,node000,,rack,0\n")
    result = CliRunner().invoke(app, ["evaluate", str(broken), "--alerts", str(alerts)])
    assert result.exit_code == 2 and "'kind'" in result.output
    # Gzipped, the file is still read, and the error names the file that was read.
    with gzip.open(broken / "failures.csv.gz", "wt") as fh:
        fh.write((broken / "failures.csv").read_text())
    (broken / "failures.csv").unlink()
    result = CliRunner().invoke(app, ["evaluate", str(broken), "--alerts", str(alerts)])
    assert result.exit_code == 2 and "failures.csv.gz" in " ".join(result.output.split())
    assert "'kind'" in result.output
    with gzip.open(broken / "gpu.csv.gz", "wt") as fh:
        fh.write("ts,node,gpu.temperature\n1,node000,60\n")
    result = CliRunner().invoke(app, ["evaluate", str(broken), "--alerts", str(alerts)])
    assert result.exit_code == 2 and "gpu.csv.gz" in result.output and "gpu" in result.output


def test_generate_trace_rejects_bad_options(app: typer.Typer, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["generate-trace", str(tmp_path / "x"), "--nodes", "0"])
    assert result.exit_code != 0 and "nodes" in result.output
    result = CliRunner().invoke(app, ["generate-trace", str(tmp_path / "x"), "--mix", "ecc"])
    assert result.exit_code != 0 and "KEY=NUMBER" in result.output
    result = CliRunner().invoke(app, ["generate-trace", str(tmp_path / "x"), "--set", "bogus=1"])
    assert result.exit_code != 0 and "bogus" in result.output
    result = CliRunner().invoke(app, ["generate-trace", str(tmp_path / "x"),
                                      "--precursor-shapes", "zigzag=1"])
    assert result.exit_code != 0 and "precursor_shapes" in result.output
    assert "zigzag" in result.output and "episodic" in result.output
    assert not (tmp_path / "x").exists()


def test_generate_trace_draws_the_precursor_shapes_asked_for(app: typer.Typer,
                                                              tmp_path: Path) -> None:
    out = tmp_path / "shaped"
    result = CliRunner().invoke(app, ["generate-trace", str(out), "--seed", "7", *SMALL,
                                      "--failure-count", "3", "--repair-scale", "0.05",
                                      "--precursor-shapes", "steps=1,surge=0"])
    assert result.exit_code == 0, result.output
    detail = pd.read_csv(out / "failures_detail.csv")
    assert len(detail) == 3 and set(detail["shape"]) == {"steps"}


def test_evaluate_does_not_care_about_row_order(app: typer.Typer, trace_dir: Path,
                                                tmp_path: Path) -> None:
    shuffled = tmp_path / "shuffled"
    shuffled.mkdir()
    for path in trace_dir.iterdir():
        if path.name in ("failures.csv", "gpu.csv.gz"):
            pd.read_csv(path).iloc[::-1].to_csv(shuffled / path.name, index=False)
        else:
            (shuffled / path.name).write_bytes(path.read_bytes())
    alerts = tmp_path / "alerts.csv"
    failures = pd.read_csv(trace_dir / "failures.csv")
    pd.DataFrame({"ts": failures["ts"] - 600, "node": failures["node"], "gpu": failures["gpu"],
                  "kind": failures["kind"], "score": 0.5, "reason": "x"}).iloc[::-1].to_csv(
        alerts, index=False)
    figures = [json.loads(CliRunner().invoke(app, ["evaluate", str(d), "--alerts", str(alerts),
                                                   "--json"]).output)
               for d in (trace_dir, shuffled)]
    assert figures[0] == figures[1] and figures[0]["recall"] == 1.0


def test_generate_trace_into_a_folder_it_cannot_make_says_so(app: typer.Typer,
                                                             tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    for target in (tmp_path / "a-file", tmp_path / "a-file" / "trace"):
        result = CliRunner().invoke(app, ["generate-trace", str(target), *SMALL])
        assert result.exit_code == 2 and "OUT_DIR" in result.output, result.output
        assert "Traceback" not in result.output
