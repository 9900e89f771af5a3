"""TelemetryHook around a real FSDP2 (``fully_shard``) run, 2 ranks on gloo, sending to a live
``foreshock serve``: FSDP's all-gathers and reduce-scatters arrive as each rank's
``train.collective.duration``, step and compute times arrive for both ranks, and the hooked run
trains exactly like an unhooked one."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from sqlalchemy import text
from torch.distributed.fsdp import fully_shard

from collector.store import Store
from tests.conftest import LiveServer, free_port
from trainer.hook import TelemetryHook

WORLD = 2
STEPS = 8
JOB = "fsdp"


def _train(rank: int, hook: TelemetryHook | None) -> tuple[list[float], list[torch.Tensor]]:
    """A two-layer MLP sharded per layer and at the root; the same data for either run."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    for layer in (model[0], model[2]):
        fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    # Each rank fits its own batch of one linear target, so the gradients differ per rank.
    x = torch.randn(32, 16, generator=torch.Generator().manual_seed(100 + rank))
    y = x @ torch.randn(16, 4, generator=torch.Generator().manual_seed(7)) / 4
    losses = []
    for _ in range(STEPS):
        if hook is None:
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
        else:
            with hook.step():
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                opt.step()
                opt.zero_grad()
        losses.append(float(loss.detach()))
    full = [p.full_tensor().detach().clone() for p in model.parameters()]  # type: ignore[operator]
    return losses, full


def _worker(rank: int, port: int, endpoint: str, queue: Any) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=WORLD)
    original = dist.all_gather_single
    _, plain = _train(rank, None)
    hook = TelemetryHook(TelemetryHook.Config(
        endpoint=endpoint, job=JOB, node=f"node{rank}", gpu="off", export_interval_s=60,
        probe_interval_s=0, profile_every_steps=0))
    patched = dist.all_gather_single is not original
    losses, hooked = _train(rank, hook)
    hook.flush()
    hook.close()
    stats = hook.stats
    queue.put((rank, {
        "patched": patched, "restored": dist.all_gather_single is original,
        "losses": losses, "steps": stats.steps, "errors": stats.errors,
        "dropped": stats.dropped_points, "exported": stats.exported_points,
        "timed": stats.collectives_timed,
        "same_params": all(torch.allclose(a, b, rtol=1e-6, atol=0)
                           for a, b in zip(hooked, plain, strict=True)),
    }))
    dist.destroy_process_group()


def _series(store: Store, name: str) -> list[tuple[int, str, str, float]]:
    """(rank, stat, attrs, value) of every point of ``name`` in job ``fsdp``."""
    with store.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text(  # type: ignore[misc]
            "SELECT e.rank, s.stat, s.attrs, p.value FROM points p "
            "JOIN series s ON s.id = p.series_id JOIN entities e ON e.id = s.entity_id "
            "WHERE s.name = :n AND e.job = :j"), {"n": name, "j": JOB}).all()]


def test_fsdp_collectives_steps_and_training_reach_the_store(
        sqlite_url: str, live_server: Callable[..., LiveServer]) -> None:
    server = live_server(sqlite_url)
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.start_processes(_worker, args=(free_port(), server.url, queue), nprocs=WORLD,
                       start_method="spawn")
    results = dict(queue.get() for _ in range(WORLD))
    for rank, out in results.items():
        assert out["patched"] and out["restored"], rank  # instrumented, then put back
        assert out["steps"] == STEPS and out["errors"] == 0, out
        assert out["dropped"] == 0 and out["exported"] > 0, out
        # Forward all-gathers and backward reduce-scatters of 3 FSDP units, every step.
        assert out["timed"] >= 2 * STEPS, out
        assert out["same_params"], rank  # the hook changes nothing FSDP computes
        losses = out["losses"]
        assert all(b < a for a, b in itertools.pairwise(losses)), losses

    store = Store.open(sqlite_url)
    durations: dict[int, dict[str, dict[str, float]]] = {}
    for rank, stat, attrs, value in _series(store, "train.collective.duration"):
        op = json.loads(attrs)["op"]
        durations.setdefault(rank, {}).setdefault(op, {})[stat] = value
    nbytes: dict[int, dict[str, float]] = {}
    for rank, _, attrs, value in _series(store, "train.collective.bytes"):
        op = json.loads(attrs)["op"]
        nbytes.setdefault(rank, {})[op] = max(value, nbytes.get(rank, {}).get(op, 0.0))
    assert set(durations) == {0, 1}
    for rank in (0, 1):
        by_op = durations[rank]
        assert {"all_gather_single", "reduce_scatter_single"} <= set(by_op), (rank, by_op)
        for op in ("all_gather_single", "reduce_scatter_single"):
            assert by_op[op]["count"] >= STEPS and by_op[op]["min"] >= 0, (rank, op, by_op[op])
            assert nbytes[rank][op] > 0, (rank, nbytes)

    step = _series(store, "train.step.duration")
    compute = _series(store, "train.compute.duration")
    assert {r for r, *_ in step} == {r for r, *_ in compute} == {0, 1}
    assert all(0 < v < 10 for *_, v in step + compute)
