import dataclasses
from pathlib import Path

import pandas as pd
import typer
from typer.testing import CliRunner

from collector import cli
from collector.fleet_trace import read_trace, write_trace
from tests.collector.test_store import T0, small_trace


def _app() -> typer.Typer:
    app = typer.Typer()
    cli.register(app)
    return app


def test_import_then_export_round_trips_a_fleet_trace(store_url: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    write_trace(src, small_trace(steps=20))
    runner = CliRunner()
    done = runner.invoke(_app(), ["import", str(src), "--db", store_url, "--job", "pretrain"])
    assert done.exit_code == 0, done.output
    assert "imported 282 points into job 'pretrain'" in done.output

    out = tmp_path / "out"
    done = runner.invoke(_app(), ["export", str(out), "--db", store_url,
                                  "--from", str(T0 + 50), "--to", str(T0 + 99)])
    assert done.exit_code == 0, done.output
    back = read_trace(out)
    assert back.meta.start == T0 + 50 and back.meta.extra == {}
    assert sorted(back.gpu["ts"].unique()) == [T0 + 50 + 10 * i for i in range(5)]
    original = read_trace(src)
    window = original.node[(original.node["ts"] >= T0 + 50) & (original.node["ts"] <= T0 + 99)]
    pd.testing.assert_frame_equal(back.node.reset_index(drop=True),
                                  window.reset_index(drop=True), check_dtype=False)


def test_import_of_a_trace_without_an_event_log_says_the_store_will_read_none(
        sqlite_url: str, tmp_path: Path) -> None:
    # The store has no place for "this fleet kept no XID log", so the user is told what the
    # service and an export will make of the job, and where the difference is kept.
    for name, trace in (("kept", small_trace()),
                        ("bare", dataclasses.replace(small_trace(), events_exported=False))):
        write_trace(tmp_path / name, trace)
        done = CliRunner().invoke(_app(), ["import", str(tmp_path / name), "--db", sqlite_url,
                                           "--job", name])
        assert done.exit_code == 0, done.output
        assert ("has no events.csv" in done.output) == (name == "bare"), done.output
    assert "job 'bare', will read it as a job that raised no XIDs" in " ".join(done.output.split())


def test_import_of_a_broken_trace_names_the_file(sqlite_url: str, tmp_path: Path) -> None:
    # A long path must come out whole: a terminal-width line break inside it once split
    # "meta.json" in two, and a user could not paste the path back.
    trace_dir = tmp_path / ("fleet-trace-from-a-deep-directory-" * 3)
    trace_dir.mkdir()
    (trace_dir / "meta.json").write_text("{}")
    done = CliRunner().invoke(_app(), ["import", str(trace_dir), "--db", sqlite_url])
    assert done.exit_code == 2
    assert str(trace_dir / "meta.json") in done.output and "format" in done.output


def test_export_rejects_an_inverted_range(sqlite_url: str, tmp_path: Path) -> None:
    done = CliRunner().invoke(_app(), ["export", str(tmp_path / "x"), "--db", sqlite_url,
                                       "--from", "10", "--to", "5"])
    assert done.exit_code != 0 and "--to 5.0 is before --from 10.0" in done.output
