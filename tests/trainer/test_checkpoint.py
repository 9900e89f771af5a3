"""Checkpoints with torch.distributed.checkpoint across real gloo process groups: what two
ranks saved (periodically, asynchronously, and on demand) three ranks resume exactly."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.conftest import free_port
from trainer.checkpoint import CheckpointConfig, Checkpointer, CheckpointInfo, latest

pytestmark = pytest.mark.timeout(120)


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def _fingerprint(model: torch.nn.Module, opt: torch.optim.Optimizer) -> list[float]:
    params = [float(p.detach().double().sum()) for p in model.parameters()]
    moments = [float(s["exp_avg_sq"].double().sum()) for s in opt.state.values()]
    return params + moments


def _run(rank: int, world: int, port: int, directory: str, phase: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    model = torch.nn.parallel.DistributedDataParallel(_model())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ckpt = Checkpointer(CheckpointConfig(dir=Path(directory) / "ckpt", every_steps=3, keep=2),
                        model=model, optimizer=opt)
    out: dict[str, object] = {}
    if phase == "train":
        torch.manual_seed(100 + rank)
        for step in range(7):
            model(torch.randn(4, 8)).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
            ckpt.maybe_save(step=step + 1, data_position=(step + 1) * 4 * world)
        info = ckpt.save(step=7, data_position=56, reason="drain node-x",
                         extra={"drain": {"node": "node-x"}})
        out = {"info_step": info.step, "next_rand": torch.rand(3).tolist()}
    else:
        resumed = ckpt.resume()
        assert resumed is not None
        out = {"info_step": resumed.step, "position": resumed.data_position,
               "reason": resumed.reason, "saved_world": resumed.world_size,
               "next_rand": torch.rand(3).tolist()}
    ckpt.close()
    out["fingerprint"] = _fingerprint(model.module, opt)
    Path(directory, f"{phase}-{rank}.json").write_text(json.dumps(out))
    dist.destroy_process_group()


def _spawn(world: int, directory: Path, phase: str) -> list[dict[str, Any]]:
    mp.spawn(_run, args=(world, free_port(), str(directory), phase), nprocs=world, join=True)
    return [json.loads((directory / f"{phase}-{r}.json").read_text()) for r in range(world)]


def test_three_ranks_resume_exactly_what_two_ranks_saved(tmp_path: Path) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    trained = _spawn(2, tmp_path, "train")
    resumed = _spawn(3, tmp_path, "resume")

    for r in resumed:
        assert (r["info_step"], r["position"], r["saved_world"]) == (7, 56, 2)
        assert r["reason"] == "drain node-x"
        # Model weights and optimizer moments are those the job had when it checkpointed.
        assert r["fingerprint"] == pytest.approx(trained[0]["fingerprint"], rel=1e-6)
    # Each rank that existed before continues its own random stream.
    assert resumed[0]["next_rand"] == trained[0]["next_rand"]
    assert resumed[1]["next_rand"] == trained[1]["next_rand"]

    # keep=2: only the newest complete checkpoints remain; periodic ones were asynchronous.
    names = sorted(p.name for p in (tmp_path / "ckpt").glob("step-*"))
    assert names == ["step-00000006", "step-00000007"]
    info = latest(tmp_path / "ckpt")
    assert info is not None and info.extra == {"drain": {"node": "node-x"}}


def _drain_at_a_periodic_step(rank: int, world: int, port: int, directory: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    model = torch.nn.parallel.DistributedDataParallel(_model())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ckpt = Checkpointer(CheckpointConfig(dir=Path(directory), every_steps=3), model=model,
                        optimizer=opt)
    for step in range(1, 4):
        model(torch.randn(4, 8)).pow(2).mean().backward()
        opt.step()
        ckpt.maybe_save(step=step, data_position=step * 4 * world)
    ckpt.close()  # the periodic checkpoint of step 3 is complete
    files = {p.name: p.stat().st_mtime_ns for p in Path(directory, "step-00000003").iterdir()}
    ckpt.save(step=3, data_position=12 * world, reason="drain node-x")  # decided at step 3
    after = {p.name: p.stat().st_mtime_ns for p in Path(directory, "step-00000003").iterdir()}
    Path(directory, f"files-{rank}.json").write_text(json.dumps([files, after]))
    dist.destroy_process_group()


def test_a_drain_at_a_periodic_step_marks_that_checkpoint_without_writing_it_again(
        tmp_path: Path) -> None:
    mp.spawn(_drain_at_a_periodic_step, args=(2, free_port(), str(tmp_path)), nprocs=2)
    info = latest(tmp_path)
    assert info is not None and (info.step, info.reason) == (3, "drain node-x")
    files, after = json.loads((tmp_path / "files-0.json").read_text())
    data = {name for name in files if name.endswith(".distcp")}
    assert len(data) == 2  # one file per rank, each written once
    assert {n: after[n] for n in data} == {n: files[n] for n in data}
    assert after["foreshock.json"] > files["foreshock.json"]


def _one_rank_stops_answering(rank: int, port: int, directory: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    model = torch.nn.parallel.DistributedDataParallel(_model())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ckpt = Checkpointer(CheckpointConfig(dir=Path(directory), timeout_s=2.0), model=model,
                        optimizer=opt)
    if rank == 1:  # alive, but never joins the save: a rank hung elsewhere or a lost node
        time.sleep(8.0)
        return
    started = time.monotonic()
    try:
        ckpt.save(step=5, data_position=40, reason="drain node-b")
        outcome = "saved"
    except RuntimeError as exc:
        outcome = str(exc)
    Path(directory, "outcome.json").write_text(json.dumps(
        {"outcome": outcome, "waited_s": time.monotonic() - started}))


def test_a_save_that_a_rank_never_joins_fails_after_the_timeout_instead_of_hanging(
        tmp_path: Path) -> None:
    mp.spawn(_one_rank_stops_answering, args=(free_port(), str(tmp_path)), nprocs=2)
    result = json.loads((tmp_path / "outcome.json").read_text())
    assert result["outcome"] != "saved"
    assert "Timed out" in result["outcome"], result
    assert result["waited_s"] >= 1.5, result  # it waited the timeout out (torch: 30 minutes)
    assert latest(tmp_path) is None  # nothing half-written looks complete


def test_an_interrupted_save_is_never_resumed_from(tmp_path: Path) -> None:
    complete = tmp_path / "step-00000010"
    complete.mkdir()
    (complete / "foreshock.json").write_text(json.dumps(
        {"step": 10, "data_position": 80, "world_size": 2, "reason": "periodic",
         "saved_at": 1.0, "extra": {}}))
    (tmp_path / "step-00000020").mkdir()  # a node died mid-save: no marker
    (tmp_path / "step-00000020" / "__0_0.distcp").write_bytes(b"partial")
    (tmp_path / "step-00000030").mkdir()
    (tmp_path / "step-00000030" / "foreshock.json").write_text("{truncated")
    info = latest(tmp_path)
    assert isinstance(info, CheckpointInfo) and info.step == 10 and info.path == complete


def test_bad_config_is_refused_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"checkpoint\.every_steps=-1"):
        CheckpointConfig(dir=tmp_path, every_steps=-1)
    with pytest.raises(ValueError, match=r"checkpoint\.keep=0"):
        CheckpointConfig(dir=tmp_path, keep=0)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=r"checkpoint\.timeout_s=.* > 0 seconds and finite"):
            CheckpointConfig(dir=tmp_path, timeout_s=bad)
