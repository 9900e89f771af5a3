"""Overhead of the telemetry hook at default settings: the same DDP training (the example's
GPT-style model) with and without the hook, interleaved in blocks within the same processes,
printing the median step-time ratio (target <= 1.01).

    python benchmarks/hook_overhead.py                     # 2 processes, gloo on CPU
    python benchmarks/hook_overhead.py --device cuda --nproc 1 -- --d-model 1024 --layers 8

Both variants run in the same process group on two identical DDP replicas of the model: the
"without" replica uses DDP's built-in all-reduce and no hook; the "with" replica runs each step
inside ``hook.step()`` with the timed comm hook. Blocks alternate in order (with/without,
without/with) so that drift and noise from other processes fall on both alike. Metrics go to a
local OTLP sink (or ``--endpoint``), so export costs are real. Each rank pretends to be its own
node so that the default link probes run too.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

from trainer.example import build_model, parse_args, synthetic_batch
from trainer.hook import TelemetryHook


class _Sink(BaseHTTPRequestHandler):
    """Accepts OTLP posts like a collector would, and throws them away."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _step(model: torch.nn.Module, opt: torch.optim.Optimizer, batch: tuple[torch.Tensor, ...],
          vocab: int) -> None:
    tokens, targets = batch
    loss = torch.nn.functional.cross_entropy(model(tokens).reshape(-1, vocab), targets.reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    float(loss.detach())  # a host sync per step, as a logging loop has


def _empty_steps(hook: TelemetryHook, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        with hook.step():
            pass
    return (time.perf_counter() - t0) / n


def _rank(rank: int, opts: argparse.Namespace, port: int, endpoint: str, out: Any) -> None:
    cuda = opts.device == "cuda"
    os.environ.setdefault("LOCAL_RANK", str(rank))
    if cuda:
        torch.cuda.set_device(rank)
    else:
        torch.set_num_threads(opts.threads)  # as torchrun does: ranks must not fight for cores
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=opts.nproc)
    args = parse_args(["--seed", "0", *opts.model_args])
    plain = build_model(args, device)
    timed = build_model(args, device)
    ids = [device.index] if cuda else None
    plain_ddp = DistributedDataParallel(plain, device_ids=ids)
    timed_ddp = DistributedDataParallel(timed, device_ids=ids)
    hook = TelemetryHook(TelemetryHook.Config(endpoint=endpoint, job="bench",
                                              node=f"bench{rank}" if opts.nodes_per_rank
                                              else None, gpu=opts.gpu))
    hook.instrument_ddp(timed_ddp, per_bucket={"auto": None, "bucket": True,
                                               "sampled": False}[opts.ddp_timing])
    opts_plain = torch.optim.AdamW(plain_ddp.parameters(), lr=1e-4)
    opts_timed = torch.optim.AdamW(timed_ddp.parameters(), lr=1e-4)
    counter = iter(range(10**9))
    times: dict[str, list[float]] = {"with": [], "without": []}

    def run(which: str, record: bool) -> None:
        for _ in range(opts.steps_per_block):
            batch = synthetic_batch(args, step=next(counter), rank=rank, device=device)
            t0 = time.perf_counter()
            if which == "with":
                with hook.step():
                    _step(timed_ddp, opts_timed, batch, args.vocab)
            else:
                _step(plain_ddp, opts_plain, batch, args.vocab)
            if record:
                times[which].append(time.perf_counter() - t0)

    run("without", False)
    run("with", False)  # warm-up of both replicas
    start = time.perf_counter()
    for block in range(opts.blocks):
        order = ("with", "without") if block % 2 == 0 else ("without", "with")
        for which in order:
            run(which, True)
    wall = time.perf_counter() - start
    stats = hook.stats
    # The hook's fixed cost per step, without a model: the best of 10 rounds of 200.
    empty_us = min(_empty_steps(hook, 200) for _ in range(10)) * 1e6
    hook.close()
    if rank == 0:
        out.put({"times": times, "wall_s": wall, "stats": dataclasses.asdict(stats),
                 "empty_step_us": empty_us})
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nproc", type=int, default=2, help="processes (ranks)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cpu runs gloo, cuda runs NCCL (one GPU per rank)")
    p.add_argument("--blocks", type=int, default=150, help="interleaved block pairs")
    p.add_argument("--steps-per-block", type=int, default=2,
                   help="steps in each block (short blocks cancel noise from other processes)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank on CPU")
    p.add_argument("--gpu", choices=("auto", "nvml", "simulated", "off"), default="auto",
                   help="the hook's GPU telemetry source")
    p.add_argument("--ddp-timing", choices=("auto", "bucket", "sampled"), default="auto",
                   help="DDP all-reduce timing: per bucket (comm hook), DDP's own sampled "
                   "timers, or auto (per bucket on CPU, sampled on GPU: the default)")
    p.add_argument("--endpoint", default=None,
                   help="send metrics to this collector instead of a local sink")
    p.add_argument("--no-nodes-per-rank", dest="nodes_per_rank", action="store_false",
                   help="keep all ranks on one node (no link probes)")
    p.add_argument("model_args", nargs="*", help="example-trainer flags after --, e.g. "
                   "-- --d-model 256 --layers 4")
    opts = p.parse_args(argv)
    server = None
    endpoint = opts.endpoint
    if endpoint is None:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    with __import__("socket").socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.start_processes(_rank, args=(opts, port, endpoint, queue), nprocs=opts.nproc,
                       start_method="spawn")
    res = queue.get()
    if server is not None:
        server.shutdown()
    with_t, without_t = res["times"]["with"], res["times"]["without"]
    med_with, med_without = statistics.median(with_t), statistics.median(without_t)
    k = opts.steps_per_block
    paired = [statistics.fmean(with_t[i:i + k]) / statistics.fmean(without_t[i:i + k])
              for i in range(0, len(with_t), k)]
    mean_with, mean_without = statistics.fmean(with_t), statistics.fmean(without_t)
    print(f"hook overhead: {opts.nproc} ranks, {opts.device}, DDP timing {opts.ddp_timing}, "
          f"{opts.blocks} interleaved block "
          f"pairs x {opts.steps_per_block} steps, model {' '.join(opts.model_args) or 'default'}")
    print(f"  median step  without {med_without * 1e3:8.2f} ms   with {med_with * 1e3:8.2f} ms")
    print(f"  mean step    without {mean_without * 1e3:8.2f} ms   with {mean_with * 1e3:8.2f} ms")
    print(f"  median step-time ratio (with/without): {med_with / med_without:.4f}   "
          f"(target <= 1.01)")
    print(f"  median of per-block-pair ratios: {statistics.median(paired):.4f}")
    print(f"  mean step-time ratio (incl. one-off costs): {mean_with / mean_without:.4f}")
    print(f"  hook.step() around an empty body: {res['empty_step_us']:.1f} us "
          f"({res['empty_step_us'] / 1e6 / med_without:.5f} of a median step)")
    print(f"  hook stats (rank 0): {json.dumps(res['stats'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
