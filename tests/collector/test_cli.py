import dataclasses
from pathlib import Path

import pandas as pd
import typer
from typer.testing import CliRunner

from collector import cli
from collector.fleet_trace import read_trace, write_trace
from collector.store import Store
from collector.trace_io import trace_batches
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


def test_a_job_imported_without_an_event_log_exports_without_one(store_url: str,
                                                                  tmp_path: Path) -> None:
    # A fleet that kept no XID log is not one that raised none: the store keeps which it was,
    # so an export gives back no events.csv, not an empty one, until a trace with a log is
    # loaded into the job.
    runner = CliRunner()
    for name, trace in (("kept", small_trace()),
                        ("bare", dataclasses.replace(small_trace(), events_exported=False))):
        write_trace(tmp_path / name, trace)
        done = runner.invoke(_app(), ["import", str(tmp_path / name), "--db", store_url,
                                      "--job", name])
        assert done.exit_code == 0, done.output
        assert ("has no events.csv" in done.output) == (name == "bare"), done.output
    assert "unknown, not zero" in " ".join(done.output.split())
    for name in ("kept", "bare"):
        done = runner.invoke(_app(), ["export", str(tmp_path / f"out-{name}"), "--db", store_url,
                                      "--job", name])
        assert done.exit_code == 0, done.output
        assert read_trace(tmp_path / f"out-{name}").events_exported == (name == "kept")
    assert "no events.csv" in done.output
    kept = read_trace(tmp_path / "out-kept")
    assert len(kept.events) == len(small_trace().events) > 0
    # Both jobs at once: the events that were kept are written out, and the export names the
    # job whose part of them reads as no XIDs.
    done = runner.invoke(_app(), ["export", str(tmp_path / "all"), "--db", store_url])
    assert read_trace(tmp_path / "all").events_exported
    assert "job(s) bare were imported without an XID log" in " ".join(done.output.split())
    # Loading the job again from a trace with its log marks it as kept.
    runner.invoke(_app(), ["import", str(tmp_path / "kept"), "--db", store_url, "--job", "bare"])
    runner.invoke(_app(), ["export", str(tmp_path / "again"), "--db", store_url, "--job", "bare"])
    assert read_trace(tmp_path / "again").events_exported
    done = runner.invoke(_app(), ["export", str(tmp_path / "all-again"), "--db", store_url])
    assert done.exit_code == 0 and "without an XID log" not in done.output


def test_an_export_of_a_time_range_names_only_the_unlogged_jobs_within_it(
        store_url: str, tmp_path: Path) -> None:
    # Job "bare" was imported without an XID log for T0+1000..T0+1090 and has a live hook's data
    # (which reports XIDs) at T0+2000..; job "kept" holds T0..T0+90.
    runner = CliRunner()
    bare = dataclasses.replace(small_trace(t0=T0 + 1000, nodes=("m0", "m1")),
                               events_exported=False)
    for name, trace in (("kept", small_trace()), ("bare", bare)):
        write_trace(tmp_path / name, trace)
        done = runner.invoke(_app(), ["import", str(tmp_path / name), "--db", store_url,
                                      "--job", name])
        assert done.exit_code == 0, done.output
    store = Store.open(store_url)
    for batch in trace_batches(small_trace(t0=T0 + 2000, nodes=("m0", "m1")), job="bare"):
        store.write(batch)
    store.close()

    def note(*window: float) -> bool:
        out = tmp_path / f"out-{len(list(tmp_path.iterdir()))}"
        args = [a for flag, t in zip(("--from", "--to"), window, strict=False)
                for a in (flag, str(t))]
        done = runner.invoke(_app(), ["export", str(out), "--db", store_url, *args])
        assert done.exit_code == 0, done.output
        return "job(s) bare were imported without" in " ".join(done.output.split())

    assert note()  # every job, every time
    assert note(T0 + 1050, T0 + 1060) and note(T0, T0 + 1000) and note(T0 + 1090)
    assert not note(T0, T0 + 99)  # "kept"'s time alone
    assert not note(T0 + 1091)  # after the import, only the hook's data, which kept its XIDs
    assert not note(T0 + 1500, T0 + 1600)  # nothing of any job


def test_import_of_a_broken_trace_names_the_file(sqlite_url: str, tmp_path: Path) -> None:
    # A long path must come out whole: a terminal-width line break inside it once split
    # "meta.json" in two, and a user could not paste the path back.
    trace_dir = tmp_path / ("fleet-trace-from-a-deep-directory-" * 3)
    trace_dir.mkdir()
    (trace_dir / "meta.json").write_text("{}")
    done = CliRunner().invoke(_app(), ["import", str(trace_dir), "--db", sqlite_url])
    assert done.exit_code == 2
    assert str(trace_dir / "meta.json") in done.output
    assert "missing field 'start'" in " ".join(done.output.split())


def test_export_rejects_an_inverted_range(sqlite_url: str, tmp_path: Path) -> None:
    done = CliRunner().invoke(_app(), ["export", str(tmp_path / "x"), "--db", sqlite_url,
                                       "--from", "10", "--to", "5"])
    assert done.exit_code != 0 and "--to 5.0 is before --from 10.0" in done.output


def test_export_to_a_folder_it_cannot_make_says_so_before_reading_the_store(
        sqlite_url: str, tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    done = CliRunner().invoke(_app(), ["export", str(tmp_path / "a-file" / "out"), "--db",
                                       sqlite_url])
    assert done.exit_code == 2 and "TRACE_DIR" in done.output and "Traceback" not in done.output
    assert not Path(sqlite_url.removeprefix("sqlite:///")).exists()  # the store was not opened


def test_import_keeps_values_no_sensor_reads_out_of_the_store(store_url: str,
                                                              tmp_path: Path) -> None:
    # PostgreSQL keeps GPU gauges as float4: 1e300 would be stored as infinity, and an inf
    # stored as one, for every query and score after. The import drops those cells alone.
    src = tmp_path / "src"
    write_trace(src, small_trace())
    gpu = pd.read_csv(src / "gpu.csv.gz")
    gpu.loc[2, "gpu.temperature"], gpu.loc[5, "gpu.temperature"] = 1e300, float("inf")
    gpu.to_csv(src / "gpu.csv.gz", index=False)
    done = CliRunner().invoke(_app(), ["import", str(src), "--db", store_url, "--job", "j"])
    assert done.exit_code == 0, done.output
    assert "imported 140 points into job 'j'" in done.output  # 142 with every cell sound
    store = Store.open(store_url)
    try:
        temps = store.read_trace(job="j").gpu["gpu.temperature"]
    finally:
        store.close()
    assert temps.isna().sum() == 2 and temps.abs().max() < 100


def test_import_refuses_names_the_store_cannot_hold_before_writing_any(store_url: str,
                                                                       tmp_path: Path) -> None:
    # On PostgreSQL a 200-character node name failed the import part way with a SQLAlchemy
    # traceback; SQLite stored it. Both now refuse it by name, with nothing written.
    long = "rack7-" + "x" * 194
    trace = small_trace(nodes=("n0", long))
    write_trace(tmp_path / "src", trace)
    runner = CliRunner()
    done = runner.invoke(_app(), ["import", str(tmp_path / "src"), "--db", store_url,
                                  "--job", "j"])
    assert done.exit_code == 2, done.output
    said = " ".join(done.output.split())
    assert "node name 'rack7-xxxx" in said and "is 200 characters long" in said
    assert "at most 128" in said and "Traceback" not in said
    done = runner.invoke(_app(), ["import", str(tmp_path / "src"), "--db", store_url,
                                  "--job", "j" * 129])
    assert done.exit_code == 2 and "give a shorter --job" in " ".join(done.output.split())
    store = Store.open(store_url)
    try:
        assert len(store.read_trace().gpu) == 0 and len(store.read_trace().events) == 0
    finally:
        store.close()


def test_export_refuses_a_time_that_is_no_number_and_a_job_the_store_lacks(
        sqlite_url: str, tmp_path: Path) -> None:
    # Both used to write an empty trace without a word: --from nan compared false with every
    # row, and a misspelt --job matched none.
    write_trace(tmp_path / "src", small_trace())
    runner = CliRunner()
    assert runner.invoke(_app(), ["import", str(tmp_path / "src"), "--db", sqlite_url,
                                  "--job", "pretrain"]).exit_code == 0
    for args, says in [(["--from", "nan"], "--from nan is no time"),
                       (["--to", "inf"], "--to inf is no time"),
                       (["--job", "pretrian"], "no data of job 'pretrian'; its jobs: pretrain")]:
        out = tmp_path / "out"
        done = runner.invoke(_app(), ["export", str(out), "--db", sqlite_url, *args])
        assert done.exit_code == 2, done.output
        assert says in " ".join(done.output.replace("│", " ").split()), done.output
        assert not out.exists()
