import dataclasses
import gzip
import json
import logging
import re
from pathlib import Path

import pandas as pd
import pytest

from collector.fleet_trace import TraceFormatError, read_trace, write_trace
from tests.collector.test_store import small_trace


def _add_column(path: Path, **values: str | float) -> None:
    df = pd.read_csv(path)
    for name, value in values.items():
        df[name] = value
    df.to_csv(path, index=False)


def test_a_trace_without_an_event_log_reads_as_one_and_an_empty_log_as_no_events(
        tmp_path: Path) -> None:
    # fleet-trace/1 makes events.csv optional: its absence means the source kept no XID log, an
    # empty one that it kept a log with nothing in it. The two must survive a write and a read.
    quiet = dataclasses.replace(small_trace(), events=small_trace().events.iloc[:0])
    write_trace(tmp_path / "quiet", quiet)
    assert (tmp_path / "quiet" / "events.csv").read_text().startswith("ts,node,gpu,kind,code")
    back = read_trace(tmp_path / "quiet")
    assert back.events_exported and len(back.events) == 0
    write_trace(tmp_path / "bare", dataclasses.replace(quiet, events_exported=False))
    assert not (tmp_path / "bare" / "events.csv").exists()
    bare = read_trace(tmp_path / "bare")
    assert not bare.events_exported and not bare.until(bare.meta.end).events_exported
    assert read_trace(tmp_path / "quiet").gpu.equals(bare.gpu)


def test_an_optional_file_with_nothing_in_it_reads_as_no_rows(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # A writer with no XIDs, probes or step times may leave the file without even a header.
    # That refused the whole trace ("No columns to parse from file"), so a backtest scored
    # nothing of a fleet for want of rows it does not need; gpu.csv.gz must still hold some.
    write_trace(tmp_path, small_trace())
    plain = read_trace(tmp_path)
    (tmp_path / "events.csv").write_bytes(b"")
    (tmp_path / "links.csv.gz").write_bytes(gzip.compress(b"\n"))
    with caplog.at_level(logging.WARNING, logger="foreshock.trace"):
        trace = read_trace(tmp_path)
    said = "\n".join(r.getMessage() for r in caplog.records)
    assert ("events.csv: empty, not even a header: read as no rows (write the header "
            "ts,node,gpu,kind,code to say so)") in said
    assert "links.csv.gz: empty, not even a header" in said
    assert trace.events_exported and len(trace.events) == 0  # a log kept, with nothing in it
    assert len(trace.links) == 0
    pd.testing.assert_frame_equal(trace.gpu, plain.gpu)
    pd.testing.assert_frame_equal(trace.node, plain.node)
    (tmp_path / "gpu.csv.gz").write_bytes(gzip.compress(b""))
    with pytest.raises(TraceFormatError, match=r"gpu.csv.gz: is empty: it needs a header"):
        read_trace(tmp_path)


@pytest.mark.parametrize(("fmt", "read"), [
    (None, True), ("fleet-trace/1.0", True), ("fleet-trace/1.2", True),
    ("fleet-trace/2", False), ("fleet-trace/10", False), ("parquet", False)])
def test_meta_json_names_its_format_or_a_minor_version_of_it(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, fmt: str | None, read: bool) -> None:
    # Before, a meta.json without 'format', or with fleet-trace/1.0, refused the whole trace.
    write_trace(tmp_path / "named", small_trace())
    write_trace(tmp_path, small_trace())
    meta = json.loads((tmp_path / "meta.json").read_text())
    meta.pop("format")
    (tmp_path / "meta.json").write_text(json.dumps(meta if fmt is None else {**meta,
                                                                            "format": fmt}))
    if not read:
        with pytest.raises(TraceFormatError,
                           match=f"field 'format' is '{fmt}', expected 'fleet-trace/1'"):
            read_trace(tmp_path)
        return
    with caplog.at_level(logging.WARNING, logger="foreshock.trace"):
        trace = read_trace(tmp_path)
    said = "\n".join(r.getMessage() for r in caplog.records)
    assert ("no field 'format': read as fleet-trace/1" in said) == (fmt is None)
    named = read_trace(tmp_path / "named")
    assert trace.meta == named.meta
    pd.testing.assert_frame_equal(trace.gpu, named.gpu)


def test_columns_no_reader_uses_are_left_out_with_a_warning_naming_them(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # A trace from another exporter may carry a job id or a newer metric: every column the
    # format defines is still sound, so the trace is read and the extra column named.
    write_trace(tmp_path, small_trace())
    plain = read_trace(tmp_path)
    _add_column(tmp_path / "node.csv.gz", job="pretrain", **{"train.collective.bytes": 1e9})
    _add_column(tmp_path / "links.csv.gz", **{"net.link.loss": 0.0})
    _add_column(tmp_path / "events.csv", message="fell off the bus")
    _add_column(tmp_path / "gpu.csv.gz", rack="r1", **{"gpu.fan.speed": 0.4})
    with caplog.at_level(logging.WARNING, logger="foreshock.trace"):
        trace = read_trace(tmp_path)
    said = "\n".join(r.getMessage() for r in caplog.records)
    assert "node.csv.gz: ignoring column(s) job, train.collective.bytes" in said
    assert "links.csv.gz: ignoring column(s) net.link.loss" in said
    assert "events.csv: ignoring column(s) message" in said
    assert "gpu.csv.gz: ignoring column(s) rack" in said  # gpu.* metrics NVML exposes stay
    pd.testing.assert_frame_equal(trace.node, plain.node)
    pd.testing.assert_frame_equal(trace.events, plain.events)
    assert list(trace.gpu.columns) == [*plain.gpu.columns, "gpu.fan.speed"]


def _rename(path: Path, **names: str) -> None:
    df = pd.read_csv(path, dtype={"node": str, "src": str, "dst": str})
    df.rename(columns=names).to_csv(path, index=False)


def test_a_metric_misspelled_or_named_as_dcgm_names_it_is_named_with_what_it_meant(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # A trace made from a dcgm-exporter dump, or by hand: before, DCGM_FI_DEV_GPU_TEMP was
    # ignored like a job id, gpu.ecc_sbe kept without a word as an extra NVML metric, and the
    # model read no temperature and no ECC errors.
    write_trace(tmp_path, small_trace())
    _rename(tmp_path / "gpu.csv.gz", **{"gpu.temperature": "DCGM_FI_DEV_GPU_TEMP",
                                        "gpu.ecc.sbe": "gpu.ecc_sbe"})
    _rename(tmp_path / "links.csv.gz", **{"net.link.bandwidth": "bandwidth"})
    _add_column(tmp_path / "gpu.csv.gz", DCGM_FI_DEV_FB_USED=60_000, **{"gpu.energy": 1e6})
    with caplog.at_level(logging.WARNING, logger="foreshock.trace"):
        trace = read_trace(tmp_path)
    said = "\n".join(r.getMessage() for r in caplog.records)
    assert ("gpu.csv.gz: ignoring column(s) DCGM_FI_DEV_GPU_TEMP (DCGM's field for "
            "gpu.temperature: name the column gpu.temperature), DCGM_FI_DEV_FB_USED (DCGM's field "
            "for gpu.memory.used: name the column gpu.memory.used, in bytes: DCGM's MiB times "
            "1048576)") in said
    assert ("gpu.csv.gz: column 'gpu.ecc_sbe' is kept as an extra metric that no feature reads; "
            "did you mean gpu.ecc.sbe?") in said
    assert "links.csv.gz: ignoring column(s) bandwidth (did you mean net.link.bandwidth?)" in said
    assert "gpu.energy" not in said  # an NVML metric with no near name is kept as it is
    assert "gpu.temperature" not in trace.gpu.columns  # advice, not a guess
    assert {"gpu.ecc_sbe", "gpu.energy"} <= set(trace.gpu.columns)


def test_event_and_failure_kinds_are_read_whatever_their_case(tmp_path: Path) -> None:
    # An exporter that writes "XID" (or " Gpu") means what fleet-trace/1 spells "xid": read as
    # another kind, its XIDs were silently not XIDs, and a backtest of our generator's fleet
    # read a GPU's risk up to 0.87 lower.
    trace = small_trace()
    write_trace(tmp_path, trace)
    plain = read_trace(tmp_path)
    assert (plain.events["kind"] == "xid").any()
    events = pd.read_csv(tmp_path / "events.csv")
    events["kind"] = events["kind"].str.upper()
    events.to_csv(tmp_path / "events.csv", index=False)
    (tmp_path / "failures.csv").write_text(
        f"ts,node,gpu,kind\n{trace.meta.start + 60},{trace.meta.nodes[0]},1, Gpu\n")
    shouted = read_trace(tmp_path, with_failures=True)
    pd.testing.assert_frame_equal(shouted.events, plain.events)
    assert list(shouted.failures["kind"]) == ["gpu"]


def test_only_xid_events_need_a_numeric_code(tmp_path: Path) -> None:
    write_trace(tmp_path, small_trace())
    path = tmp_path / "events.csv"
    events = pd.read_csv(path)
    extra = pd.DataFrame({"ts": [events["ts"].max() + 1], "node": ["n0"], "gpu": [None],
                          "kind": ["maintenance"], "code": ["reboot"]})
    pd.concat([events, extra]).to_csv(path, index=False)
    trace = read_trace(tmp_path)
    assert trace.events["kind"].tolist() == ["xid", "xid", "maintenance"]
    assert trace.events["code"].tolist()[:2] == [79.0, 48.0]
    assert pd.isna(trace.events["code"].iloc[2])

    extra["kind"] = "xid"
    pd.concat([events, extra]).to_csv(path, index=False)
    with pytest.raises(TraceFormatError, match=r"events.csv.*column 'code'.*'reboot' on line 4"):
        read_trace(tmp_path)


def _set_cell(path: Path, line: int, col: str, value: str) -> None:
    """Write ``value`` into ``col`` on ``line`` of the file (1-based, the header is line 1)."""
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    df.loc[line - 2, col] = value
    df.to_csv(path, index=False)


def test_values_no_sensor_reads_are_read_as_missing_and_named(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # An exporter may write inf for a reading it lost, a sentinel (DCGM's blank for a float
    # field is 2**47), or garbage far beyond any sensor. OTLP ingest refuses such points one by
    # one; a trace drops those cells alone, says where, and keeps every other value (before, an
    # inf temperature raised alerts on every node, and so did the blank).
    write_trace(tmp_path, small_trace())
    plain = read_trace(tmp_path)
    _set_cell(tmp_path / "gpu.csv.gz", 5, "gpu.temperature", "inf")
    _set_cell(tmp_path / "gpu.csv.gz", 9, "gpu.temperature", "-Infinity")
    _set_cell(tmp_path / "gpu.csv.gz", 7, "gpu.ecc.sbe", "1e300")
    _set_cell(tmp_path / "gpu.csv.gz", 11, "gpu.temperature", str(2**47))
    _set_cell(tmp_path / "gpu.csv.gz", 12, "gpu.ecc.sbe", str(2**63 - 16))  # a 64-bit blank
    _set_cell(tmp_path / "links.csv.gz", 3, "net.link.bandwidth", "-inf")
    _set_cell(tmp_path / "links.csv.gz", 4, "net.link.latency", "[Not Supported]")  # nvidia-smi
    _set_cell(tmp_path / "links.csv.gz", 6, "net.link.latency", "[N/A]")
    with caplog.at_level(logging.WARNING, logger="foreshock.trace"):
        trace = read_trace(tmp_path)
    said = "\n".join(r.getMessage() for r in caplog.records)
    assert ("gpu.csv.gz: column 'gpu.temperature' has 3 value(s) that are not finite or outside "
            "-273.15 to 1000 C (the first inf on line 5); read as missing") in said
    assert "column 'gpu.ecc.sbe' has 2 value(s)" in said and "1e+300 on line 7" in said
    assert "links.csv.gz: column 'net.link.bandwidth' has 1 value(s)" in said
    lost = trace.gpu.isna() & plain.gpu.notna()
    assert lost.sum().to_dict() == {**dict.fromkeys(plain.gpu.columns, 0),
                                    "gpu.temperature": 3, "gpu.ecc.sbe": 2}
    pd.testing.assert_frame_equal(trace.gpu[~lost.any(axis=1)], plain.gpu[~lost.any(axis=1)])
    assert ("links.csv.gz: column 'net.link.latency' has 2 value(s) that are not numbers (the "
            "first '[Not Supported]' on line 4); read as missing") in said
    assert trace.links["net.link.bandwidth"].isna().sum() == 1
    latency = trace.links["net.link.latency"]
    assert latency.isna().tolist() == [i in (2, 4) for i in range(len(latency))]
    assert latency.dropna().equals(plain.links["net.link.latency"].drop([2, 4]))


def test_values_in_a_unit_often_written_for_the_one_named_are_kept(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Kelvin for Celsius, NVML's milliwatts for watts, percent for a ratio: wrong units, but the
    # features read changes and peers, which such a trace keeps. Only what no sensor reads goes.
    trace = small_trace()
    gpu = trace.gpu.assign(**{"gpu.temperature": trace.gpu["gpu.temperature"] + 273.15,
                              "gpu.power": 700_000.0, "gpu.utilization": 97.0})
    write_trace(tmp_path, dataclasses.replace(trace, gpu=gpu))
    with caplog.at_level(logging.WARNING, logger="foreshock.trace"):
        read = read_trace(tmp_path)
    assert caplog.records == []
    pd.testing.assert_frame_equal(read.gpu[gpu.columns], gpu, check_dtype=False)


@pytest.mark.parametrize(("file", "line", "col", "value", "says"), [
    ("gpu.csv.gz", 4, "ts", "inf", "column 'ts' has inf on line 4, which is not a finite time"),
    ("gpu.csv.gz", 3, "gpu", "0.5", "column 'gpu' has 0.5 on line 3, which is not a GPU index "
                                    "(a whole number from 0 to 2147483647)"),
    ("gpu.csv.gz", 3, "gpu", "-1", "column 'gpu' has -1 on line 3"),
    ("gpu.csv.gz", 3, "gpu", str(2**31), "column 'gpu' has 2147483648 on line 3"),
    ("events.csv", 2, "gpu", "inf", "column 'gpu' has inf on line 2, which is not a GPU index "
                                    "(a whole number from 0 to 2147483647; empty for none)"),
    ("events.csv", 2, "gpu", "-inf", "column 'gpu' has -inf on line 2"),
    ("events.csv", 3, "code", "79.5", "column 'code' has 79.5 on line 3, which is not an XID "
                                      "code"),
    # A metric written as text reads as missing; a key cannot be guessed.
    ("gpu.csv.gz", 4, "ts", "[N/A]", "column 'ts' has a non-numeric value '[N/A]' on line 4"),
    ("gpu.csv.gz", 5, "gpu", "GPU-3", "column 'gpu' has a non-numeric value 'GPU-3' on line 5"),
])
def test_times_gpu_indices_and_xid_codes_that_cannot_be_are_refused_naming_the_line(
        tmp_path: Path, file: str, line: int, col: str, value: str, says: str) -> None:
    # Before, an inf time crashed the replay, and a GPU index of 0.5 was read as GPU 0.
    write_trace(tmp_path, small_trace())
    _set_cell(tmp_path / file, line, col, value)
    with pytest.raises(TraceFormatError, match=re.escape(f"{file}: {says}")):
        read_trace(tmp_path)


def test_a_node_event_may_name_its_gpu_as_minus_one(tmp_path: Path) -> None:
    write_trace(tmp_path, small_trace())
    _set_cell(tmp_path / "events.csv", 3, "gpu", "-1")  # write_trace leaves it empty
    assert read_trace(tmp_path).events["gpu"].tolist() == [1, -1]


def test_rows_far_from_the_traces_window_are_left_out_and_times_in_milliseconds_refused(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # One event stamped by a clock 70 years off made the replay step through those years (it
    # never finished); times in milliseconds asked for a 44 GiB array. Rows late by hours are
    # a meta.json that ends early, and stay.
    trace = small_trace()
    late = trace.meta.end + 7200
    events = pd.concat([trace.events, pd.DataFrame(
        {"ts": [4e9, late], "node": ["n1", "n1"], "gpu": [0, 0], "kind": ["xid", "xid"],
         "code": [48.0, 79.0]})], ignore_index=True)
    write_trace(tmp_path, dataclasses.replace(trace, events=events))
    with caplog.at_level(logging.WARNING, logger="foreshock.trace"):
        back = read_trace(tmp_path)
    assert back.events["ts"].tolist() == [*trace.events["ts"], late]
    said = "\n".join(r.getMessage() for r in caplog.records)
    assert ("events.csv: 1 row(s) with ts far outside meta.json's start..end left out (the "
            "first 4000000000 on line 4 (2096-10-02T07:06:40Z)") in said
    assert "Unix seconds" in said
    pd.testing.assert_frame_equal(back.gpu, read_trace(tmp_path).gpu)
    gpu = trace.gpu.assign(ts=trace.gpu["ts"] * 1000)
    write_trace(tmp_path, dataclasses.replace(trace, gpu=gpu))
    with pytest.raises(TraceFormatError, match=r"gpu.csv.gz: no row's ts lies within a day .* "
                                               r"times are Unix seconds, and milliseconds"):
        read_trace(tmp_path)


def test_a_header_with_spaces_after_its_commas_is_read(tmp_path: Path) -> None:
    write_trace(tmp_path, small_trace())
    plain = read_trace(tmp_path)
    gpu = pd.read_csv(tmp_path / "gpu.csv.gz")
    gpu.rename(columns=lambda c: f" {c}").to_csv(tmp_path / "gpu.csv.gz", index=False)
    pd.testing.assert_frame_equal(read_trace(tmp_path).gpu, plain.gpu)
    # Node names that look like numbers stay names: "007" was read as 7.0 after ", ".
    names = {n: f"{i:03d}" for i, n in enumerate(plain.meta.nodes)}
    meta = json.loads((tmp_path / "meta.json").read_text())
    (tmp_path / "meta.json").write_text(json.dumps({**meta, "nodes": list(names.values())}))
    gpu["node"] = gpu["node"].map(names)
    lines = gpu.to_csv(index=False).splitlines()
    text = "\n".join(line.replace(",", ", ") for line in lines) + "\n"
    (tmp_path / "gpu.csv.gz").write_bytes(gzip.compress(text.encode()))
    read = read_trace(tmp_path).gpu
    assert sorted(read["node"].unique()) == sorted(names.values())
    pd.testing.assert_frame_equal(read.drop(columns="node"), plain.gpu.drop(columns="node"))


def test_meta_nodes_must_name_the_nodes(tmp_path: Path) -> None:
    write_trace(tmp_path, small_trace())
    meta = json.loads((tmp_path / "meta.json").read_text())
    (tmp_path / "meta.json").write_text(json.dumps({**meta, "nodes": 2}))
    with pytest.raises(TraceFormatError, match=r"meta.json.*'nodes' must be a list of node names"):
        read_trace(tmp_path)


def test_nodes_meta_json_does_not_list_are_read_and_named(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # A meta.json written before the fleet grew: the new node's rows are still scored, but
    # evaluate refuses alerts on a node that is not the trace's, so the reader says so first.
    trace = small_trace()
    write_trace(tmp_path, trace)
    meta = json.loads((tmp_path / "meta.json").read_text())
    (tmp_path / "meta.json").write_text(json.dumps({**meta, "nodes": meta["nodes"][1:]}))
    with caplog.at_level(logging.WARNING, logger="foreshock.trace"):
        read = read_trace(tmp_path)
    said = "\n".join(r.getMessage() for r in caplog.records)
    left_out = repr(trace.meta.nodes[0])
    assert (f"gpu.csv.gz: column 'node' names 1 node(s) that meta.json's 'nodes' does not list "
            f"({left_out})") in said
    assert "links.csv.gz: column 'src' names 1 node(s)" in said
    assert len(read.gpu) == len(trace.gpu)  # nothing is left out
    caplog.clear()
    write_trace(tmp_path, trace)  # meta.json lists every node again
    with caplog.at_level(logging.WARNING, logger="foreshock.trace"):
        read_trace(tmp_path)
    assert "does not list" not in "\n".join(r.getMessage() for r in caplog.records)


def test_files_compressed_otherwise_than_the_format_names_them_are_read_and_named(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # A writer that gzips events.csv like the others, or leaves node.csv plain, means the same
    # data: read as absent, its XIDs read unknown and its step times left out without a word.
    trace = small_trace()
    write_trace(tmp_path / "as_named", trace)
    (tmp_path / "as_named" / "failures.csv").write_text(
        f"ts,node,gpu,kind,precursor_s\n{trace.meta.start + 60},{trace.meta.nodes[0]},1,gpu,600\n")
    named = read_trace(tmp_path / "as_named", with_failures=True)
    other = tmp_path / "other"
    other.mkdir()
    (other / "meta.json").write_text((tmp_path / "as_named" / "meta.json").read_text())
    named.gpu.to_csv(other / "gpu.csv", index=False)
    named.node.to_csv(other / "node.csv", index=False)
    named.links.to_csv(other / "links.csv", index=False)
    named.events.to_csv(other / "events.csv.gz", index=False)
    assert named.failures is not None and len(named.events) and len(named.node)
    named.failures.to_csv(other / "failures.csv.gz", index=False)
    with caplog.at_level(logging.WARNING, logger="foreshock.trace"):
        back = read_trace(other, with_failures=True)
    said = "\n".join(r.getMessage() for r in caplog.records)
    assert f"{other / 'events.csv.gz'}: read as events.csv (fleet-trace/1 names it" in said
    assert f"{other / 'gpu.csv'}: read as gpu.csv.gz" in said
    assert back.events_exported
    for got, want in ((back.gpu, named.gpu), (back.node, named.node), (back.links, named.links),
                      (back.events, named.events), (back.failures, named.failures)):
        pd.testing.assert_frame_equal(got, want)
    # Both forms present: the one the format names is read, the other named as ignored.
    (other / "gpu.csv.gz").write_bytes((tmp_path / "as_named" / "gpu.csv.gz").read_bytes())
    pd.DataFrame({"ts": [1.0], "node": ["x"], "gpu": [0]}).to_csv(other / "gpu.csv", index=False)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="foreshock.trace"):
        pd.testing.assert_frame_equal(read_trace(other).gpu, named.gpu)
    assert f"{other / 'gpu.csv'}: ignored, gpu.csv.gz is read" in caplog.text
    (other / "gpu.csv").unlink()
    (other / "gpu.csv.gz").unlink()
    with pytest.raises(TraceFormatError, match=r"gpu\.csv\.gz: missing \(required by"):
        read_trace(other)
