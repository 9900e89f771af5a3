"""CollectiveTimer in real gloo process groups (2 ranks, torch.multiprocessing): every
collective is timed as its rank saw it, DDP's buckets through the comm hook, reversibly."""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

from tests.conftest import free_port
from trainer.collectives import CollectiveTimer

WORLD = 2
SLOW_S = 0.3


def _records(timer: CollectiveTimer) -> list[dict[str, Any]]:
    return [{"op": r.op, "group": r.group, "nbytes": r.nbytes, "is_async": r.is_async,
             "duration_s": r.duration_s, "step": r.step} for r in timer.collect()]


def _ddp_grads(rank: int, timer: CollectiveTimer | None) -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(16, 16),
                                                        torch.nn.Linear(16, 4)))
    if timer is not None:
        timer.instrument_ddp(model)
    x = torch.full((4, 16), float(rank + 1))
    model(x).sum().backward()
    return [p.grad.clone() for p in model.parameters()]  # type: ignore[union-attr]


def _worker(rank: int, port: int, queue: Any) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=WORLD)
    original = dist.all_reduce
    timer = CollectiveTimer()
    timer.install()
    out: dict[str, Any] = {"patched": dist.all_reduce is not original}
    t = torch.ones(1000)
    if rank == 1:
        time.sleep(SLOW_S)  # a late rank: rank 0 waits for it inside all_reduce
    dist.all_reduce(t)
    out["sum"] = float(t[0])
    timer.step = 1
    dist.broadcast(t, src=0)
    gathered = [torch.zeros(1000) for _ in range(WORLD)]
    dist.all_gather(gathered, t)
    if rank == 0:
        dist.send(torch.arange(10.0), dst=1)
    else:
        dist.recv(torch.zeros(10), src=0)
    work = dist.all_reduce(torch.ones(256, dtype=torch.float64), async_op=True)
    work.wait()
    reqs = [dist.isend(torch.ones(4), dst=1 - rank), dist.irecv(torch.zeros(4), src=1 - rank)]
    for r in reqs:
        r.wait()
    group = dist.new_group([0, 1])
    dist.all_reduce(torch.ones(8), group=group)
    dist.barrier()
    time.sleep(0.05)  # let the async completions land
    out["records"] = _records(timer)
    with timer.paused():
        dist.all_reduce(torch.ones(8))
    out["paused_records"] = _records(timer)
    timed = _ddp_grads(rank, timer)
    out["ddp_records"] = _records(timer)
    # DDP's own sampled timers instead of a comm hook (the GPU default): no Python per bucket.
    torch.manual_seed(0)
    native = DistributedDataParallel(torch.nn.Linear(64, 64))
    timer.instrument_ddp(native, per_bucket=False, sample_every=2)
    sampled = []
    for step in range(8):
        timer.step = step
        native(torch.randn(4, 64)).sum().backward()
        sampled += [(r.op, r.nbytes, r.duration_s, r.exposed_s, r.weight) for r in timer.collect()]
    out["native"] = sampled
    timer.uninstall()
    out["restored"] = dist.all_reduce is original
    dist.all_reduce(torch.ones(8))
    plain = _ddp_grads(rank, None)
    out["after_uninstall"] = _records(timer)
    out["grads_equal"] = all(torch.allclose(a, b) for a, b in zip(timed, plain, strict=True))
    queue.put((rank, out))
    dist.destroy_process_group()


def test_collectives_are_timed_as_each_rank_saw_them() -> None:
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.start_processes(_worker, args=(free_port(), queue), nprocs=WORLD, start_method="spawn")
    results = dict(queue.get() for _ in range(WORLD))
    for rank, out in results.items():
        assert out["patched"] and out["restored"], rank
        assert out["sum"] == WORLD
        ops = [r["op"] for r in out["records"]]
        assert ops[:4] == ["all_reduce", "broadcast", "all_gather",
                           "send" if rank == 0 else "recv"]
        assert {"isend", "irecv", "barrier"} <= set(ops)
        first = out["records"][0]
        assert (first["nbytes"], first["group"], first["is_async"], first["step"]) == \
            (4000, "world", False, 0)
        async_ar = [r for r in out["records"] if r["op"] == "all_reduce" and r["is_async"]]
        assert len(async_ar) == 1 and async_ar[0]["nbytes"] == 256 * 8
        assert all(r["duration_s"] is not None and r["duration_s"] >= 0 for r in out["records"])
        grouped = [r for r in out["records"] if r["op"] == "all_reduce" and r["nbytes"] == 32]
        assert len(grouped) == 1 and grouped[0]["group"] != "world"
        assert out["paused_records"] == []  # the hook's own traffic is not counted
        ddp = out["ddp_records"]
        assert ddp and all(r["op"] == "all_reduce" and r["is_async"] for r in ddp)
        assert sum(r["nbytes"] for r in ddp) == (16 * 16 + 16 + 16 * 4 + 4) * 4
        assert out["grads_equal"]  # timing DDP changes nothing it computes
        assert out["after_uninstall"] == []
        native = out["native"]
        assert len(native) >= 2, native
        for op, nbytes, duration, exposed, weight in native:
            assert (op, nbytes, weight) == ("all_reduce", (64 * 64 + 64) * 4, 2)
            assert duration > 0 and 0 <= exposed <= duration
    # The early rank waited for the late one inside its first all_reduce; the late one did not.
    assert results[0]["records"][0]["duration_s"] > 0.8 * SLOW_S
    assert results[1]["records"][0]["duration_s"] < results[0]["records"][0]["duration_s"]
