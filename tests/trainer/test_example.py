"""The example trainer under torchrun (2 ranks, gloo, each rank pretending to be a node) with
the hook sending to a live ``foreshock serve``: every rank's metrics arrive, and a straggler's
delay shows as its compute time and as the other rank's collective wait."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import text

from collector.store import Store
from tests.conftest import LiveServer, free_port
from trainer.example import build_parser, parse_args

ROOT = Path(__file__).resolve().parents[2]
SLOW_MS = 120.0


def _per_rank(store: Store, name: str) -> dict[int, list[float]]:
    with store.engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT e.rank, p.value FROM points p JOIN series s ON s.id = p.series_id "
            "JOIN entities e ON e.id = s.entity_id WHERE s.name = :n AND s.stat = '' "
            "ORDER BY p.ts"), {"n": name}).all()
    out: dict[int, list[float]] = {}
    for rank, value in rows:
        out.setdefault(rank, []).append(value)
    return out


@pytest.mark.slow
@pytest.mark.timeout(480)  # its own 240 s, and waiting for another torchrun test
@pytest.mark.usefixtures("one_torchrun_job")
def test_two_rank_run_reaches_the_store_and_shows_the_straggler(
        sqlite_url: str, live_server: Callable[..., LiveServer], tmp_path: Path) -> None:
    server = live_server(sqlite_url)
    result = tmp_path / "rank{rank}.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-port", str(free_port()), "-m", "trainer.example",
           "--steps", "40", "--batch-size", "4", "--seq-len", "16", "--d-model", "32",
           "--layers", "1", "--heads", "2", "--vocab", "64", "--log-every", "0",
           "--slow-rank", "1", "--slow-ms", str(SLOW_MS),
           "--endpoint", server.url, "--job", "ex", "--node-name", "node{rank}",
           "--gpu", "simulated", "--simulated-gpus", "2", "--export-interval", "0.5",
           "--probe-interval", "0.3", "--probe-budget", "1", "--profile-every", "15",
           "--result", str(result)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [json.loads(Path(str(result).format(rank=r)).read_text()) for r in (0, 1)]
    for r in ranks:
        assert r["steps"] == 40 and r["world"] == 2
        assert r["hook"]["dropped_points"] == 0 and r["hook"]["errors"] == 0
        assert r["hook"]["collectives_timed"] >= 40 and r["hook"]["probe_rounds"] >= 1

    store = Store.open(sqlite_url)
    trace = store.read_trace(job="ex")
    assert set(trace.node["node"]) == {"node0", "node1"}
    assert set(zip(trace.gpu["node"], trace.gpu["gpu"], strict=True)) == {
        ("node0", 0), ("node0", 1), ("node1", 0), ("node1", 1)}
    links = trace.links
    assert {("node0", "node1"), ("node1", "node0")} <= set(zip(links["src"], links["dst"],
                                                               strict=True))
    assert (links["net.link.bandwidth"] > 0).all() and (links["net.link.latency"] > 0).all()

    step = _per_rank(store, "train.step.duration")
    compute = _per_rank(store, "train.compute.duration")
    assert set(step) == set(compute) == {0, 1}
    med = {r: (statistics.median(step[r]), statistics.median(compute[r])) for r in (0, 1)}
    wait = {r: med[r][0] - med[r][1] for r in (0, 1)}
    slow_s = SLOW_MS / 1000
    # The straggler's delay is its own compute time, and the time its peer waits.
    assert med[1][1] > med[0][1] + 0.5 * slow_s, med
    assert wait[0] > wait[1] + 0.5 * slow_s, (med, wait)
    assert all(0 < med[r][1] <= med[r][0] for r in (0, 1))
    with store.engine.connect() as conn:
        coll = conn.execute(text(
            "SELECT DISTINCT e.rank, s.attrs FROM series s JOIN entities e ON e.id = s.entity_id "
            "WHERE s.name = 'train.collective.duration'")).all()
    assert {r for r, _ in coll} == {0, 1}
    assert all('"op": "all_reduce"' in a and '"group": "world"' in a for _, a in coll)


def test_every_flag_has_help_and_bad_values_are_named(capsys: pytest.CaptureFixture[str]) -> None:
    assert all(a.help for a in build_parser()._actions)
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    usage = capsys.readouterr().out
    for flag in ("--steps", "--endpoint", "--node-name", "--gpu", "--probe-interval",
                 "--profile-every", "--slow-rank", "--no-hook"):
        assert flag in usage
    with pytest.raises(SystemExit):
        parse_args(["--steps", "0"])
    assert "--steps=0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["--d-model", "30", "--heads", "4"])
    assert "--d-model=30" in capsys.readouterr().err
    for flag in ("--checkpoint-timeout", "--poll-interval"):
        for bad in ("0", "nan", "inf"):
            with pytest.raises(SystemExit):
                parse_args(["--checkpoint-dir", "ck", flag, bad])
            assert f"{flag}={float(bad)} must be > 0 seconds and finite" in (
                capsys.readouterr().err)
    args = parse_args(["--steps", "5", "--no-hook"])
    assert args.steps == 5 and not args.hook
