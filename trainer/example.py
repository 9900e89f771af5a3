"""Example trainer: a small GPT-style model on synthetic tokens under DDP, on CPU (gloo) or GPU
(NCCL), with the telemetry hook enabled by flags. Launch with torchrun, e.g.::

    torchrun --nproc-per-node 2 -m trainer.example --steps 200 --endpoint http://127.0.0.1:8000
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from trainer.drain import Drained, exit_now
from trainer.gpu import GpuReader
from trainer.hook import TelemetryHook
from trainer.resilience import Resilience, add_flags, flag_error
from trainer.simulated_gpu import KINDS, SimulatedGpuReader, node_seed

log = logging.getLogger("foreshock.example")


def build_parser() -> argparse.ArgumentParser:
    """The command line of the example (every flag has a help text)."""
    p = argparse.ArgumentParser(prog="python -m trainer.example", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    a = p.add_argument
    a("--steps", type=int, default=100, help="optimizer steps to run")
    a("--batch-size", type=int, default=8, help="sequences per rank and step")
    a("--seq-len", type=int, default=64, help="tokens per sequence")
    a("--vocab", type=int, default=512, help="vocabulary size of the synthetic tokens")
    a("--d-model", type=int, default=128, help="model width")
    a("--layers", type=int, default=2, help="transformer blocks")
    a("--heads", type=int, default=4, help="attention heads per block")
    a("--lr", type=float, default=3e-4, help="AdamW learning rate")
    a("--seed", type=int, default=0, help="seed of the model init and the data")
    a("--device", choices=("auto", "cpu", "cuda"), default="auto",
      help="cuda (NCCL) where available with auto, else cpu (gloo)")
    a("--slow-rank", type=int, default=-1, help="rank that sleeps --slow-ms in each step "
      "(injects a straggler; -1 for none)")
    a("--slow-ms", type=float, default=0.0, help="compute delay per step on --slow-rank")
    a("--log-every", type=int, default=20, help="log loss and step time every N steps (0: never)")
    a("--step-period", type=float, default=0.0, help="pad each step to at least this many "
      "seconds (stands in for a larger model; 0: no padding)")
    a("--result", default=None, help="write a JSON summary per rank to this path "
      "({rank} is replaced)")
    h = p.add_argument_group("telemetry hook")
    b = h.add_argument
    b("--hook", action=argparse.BooleanOptionalAction, default=True,
      help="measure the run with the Foreshock telemetry hook")
    b("--endpoint", default=None, help="OTLP/HTTP base URL of foreshock serve "
      "(default: OTEL_EXPORTER_OTLP_ENDPOINT or http://localhost:4318)")
    b("--job", default="example", help="job name attached to every metric")
    b("--node-name", dest="node", default=None, help="node name; may use {rank} and "
      "{local_rank} to pretend several nodes on one machine (default: FORESHOCK_NODE or the "
      "host name)")
    b("--gpu", choices=("auto", "nvml", "simulated", "off"), default="auto",
      help="GPU telemetry source")
    b("--simulated-gpus", type=int, default=8, help="GPUs per node with --gpu simulated")
    b("--export-interval", type=float, default=None, help="seconds between exports (default 5)")
    b("--probe-interval", type=float, default=60.0, help="seconds between link probes (0: off)")
    b("--probe-budget", type=float, default=0.002,
      help="largest fraction of training time the link probes may take")
    b("--profile-every", type=int, default=2000,
      help="profile one step in this many (0: off)")
    b("--no-collectives", dest="collectives", action="store_false",
      help="do not time torch.distributed collectives")
    b("--inject", default=None, metavar="KIND:GPU:START:FAIL",
      help=f"with --gpu simulated: a degradation ({', '.join(KINDS)}) of GPU that starts at "
      "Unix time START and fails at FAIL")
    b("--inject-node", default=None, help="the node whose simulated GPU gets --inject "
      "(default: every node)")
    add_flags(p)
    return p


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = build_parser()
    args = p.parse_args(argv)
    if args.steps < 1:
        p.error(f"--steps={args.steps} must be >= 1")
    if args.inject is not None:
        try:
            kind, gpu, start, fail = args.inject.split(":")
            args.inject = (kind, int(gpu), float(start), float(fail))
        except ValueError:
            p.error(f"--inject={args.inject!r} must be KIND:GPU:START:FAIL")
        if kind not in KINDS:
            p.error(f"--inject kind {kind!r} must be one of {', '.join(KINDS)}")
    if problem := flag_error(args):
        p.error(problem)
    if args.d_model % args.heads:
        p.error(f"--d-model={args.d_model} must be a multiple of --heads={args.heads}")
    return args


class TinyGPT(nn.Module):
    """Token and position embeddings, causal pre-norm transformer blocks, a tied LM head."""

    mask: torch.Tensor

    def __init__(self, *, vocab: int, d_model: int, layers: int, heads: int, seq_len: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq_len, d_model)
        block = nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, dropout=0.0,
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq_len),
                             persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        t = tokens.shape[1]
        x = self.tok(tokens) + self.pos(torch.arange(t, device=tokens.device))
        x = self.blocks(x, mask=self.mask[:t, :t], is_causal=True)
        return self.norm(x) @ self.tok.weight.T


def build_model(args: argparse.Namespace, device: torch.device) -> nn.Module:
    torch.manual_seed(args.seed)
    model = TinyGPT(vocab=args.vocab, d_model=args.d_model, layers=args.layers,
                    heads=args.heads, seq_len=args.seq_len)
    return model.to(device)


def synthetic_batch(args: argparse.Namespace, *, step: int, rank: int,
                    device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequences that count up modulo the vocabulary (learnable, so the loss falls); the same
    batch for the same (seed, rank, step), so a run resumed from a checkpoint sees the data it
    would have seen."""
    gen = torch.Generator().manual_seed(args.seed * 1_000_003 + rank * 100_003 + step)
    start = torch.randint(0, args.vocab, (args.batch_size, 1), generator=gen)
    seq = (start + torch.arange(args.seq_len + 1)) % args.vocab
    seq = seq.to(device)
    return seq[:, :-1], seq[:, 1:]


def build_optimizer(args: argparse.Namespace, model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=args.lr)


@dataclass(frozen=True, kw_only=True, slots=True)
class TrainResult:
    """What one rank saw."""

    rank: int
    steps: int
    first_loss: float
    last_loss: float
    step_times_s: list[float]


def setup_distributed(args: argparse.Namespace) -> tuple[int, int, torch.device]:
    """Join the torchrun process group (or run alone); NCCL on GPU, gloo on CPU."""
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    if "WORLD_SIZE" in os.environ and not dist.is_initialized():
        dist.init_process_group("nccl" if use_cuda else "gloo", device_id=device if use_cuda
                                else None)
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size(), device
    return 0, 1, device


def build_hook(args: argparse.Namespace, rank: int, *,
               gpu_reader: GpuReader | None = None) -> TelemetryHook | None:
    """The hook as the flags configure it (None with --no-hook); ``gpu_reader`` (e.g. a
    `SimulatedGpuReader` with an injected degradation) replaces the one ``--gpu`` selects."""
    if not args.hook:
        return None
    node = args.node.format(rank=rank, local_rank=os.environ.get("LOCAL_RANK", "0")) \
        if args.node else None
    return TelemetryHook(TelemetryHook.Config(
        endpoint=args.endpoint, job=args.job, node=node, gpu=args.gpu,
        simulated_gpus=args.simulated_gpus, seed=args.seed,
        export_interval_s=args.export_interval, probe_interval_s=args.probe_interval,
        probe_budget=args.probe_budget, profile_every_steps=args.profile_every,
        collectives=args.collectives), gpu_reader=gpu_reader)


def node_name(args: argparse.Namespace, rank: int) -> str:
    """This process's node, as the hook names it."""
    if args.node:
        return str(args.node.format(rank=rank, local_rank=os.environ.get("LOCAL_RANK", "0")))
    return os.environ.get("FORESHOCK_NODE") or socket.gethostname()


def injected_reader(args: argparse.Namespace, node: str) -> SimulatedGpuReader | None:
    """This node's simulated GPUs with --inject's degradation, where it applies."""
    if args.inject is None or args.gpu != "simulated" or args.inject_node not in (None, node):
        return None
    kind, gpu, start, fail = args.inject
    # The hook's own simulated reader would use the same seed: only the degradation differs.
    reader = SimulatedGpuReader(gpus=args.simulated_gpus, seed=node_seed(args.seed, node))
    reader.inject(kind, gpu=gpu, start_at=start, failure_at=fail)
    return reader


def train(args: argparse.Namespace, *, model: nn.Module, optimizer: torch.optim.Optimizer,
          device: torch.device, rank: int, hook: TelemetryHook | None = None,
          start_step: int = 0, resilience: Resilience | None = None) -> TrainResult:
    """The training loop: steps ``start_step`` .. ``args.steps - 1``, each inside
    ``hook.step()`` when a hook is given (its ``on_step_end`` callbacks run after each), then
    ``resilience.after_step`` (checkpoints, decisions, drains; it may raise `Drained`)."""
    world = dist.get_world_size() if dist.is_initialized() else 1
    loss_fn = nn.CrossEntropyLoss()
    losses: list[float] = []
    times: list[float] = []
    step_ctx = hook.step if hook is not None else _no_step
    for step in range(start_step, args.steps):
        tokens, targets = synthetic_batch(args, step=step, rank=rank, device=device)
        t0 = time.perf_counter()
        with step_ctx():
            logits = model(tokens)
            loss = loss_fn(logits.reshape(-1, args.vocab), targets.reshape(-1))
            if rank == args.slow_rank and args.slow_ms > 0:
                time.sleep(args.slow_ms / 1000.0)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            value = float(loss.detach())
            if args.step_period > 0:
                time.sleep(max(0.0, args.step_period - (time.perf_counter() - t0)))
        times.append(time.perf_counter() - t0)
        losses.append(value)
        if args.log_every and rank == 0 and (step + 1) % args.log_every == 0:
            log.info("step %d loss %.3f step %.1f ms", step + 1, value, 1000 * times[-1])
        if resilience is not None:
            resilience.after_step(step + 1, samples=args.batch_size * world)
    return TrainResult(rank=rank, steps=len(losses), first_loss=losses[0] if losses else 0.0,
                       last_loss=losses[-1] if losses else 0.0, step_times_s=times)


class _NoStep:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _no_step() -> _NoStep:
    return _NoStep()


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per decision poll is noise
    args = parse_args(argv)
    rank, world, device = setup_distributed(args)
    model = build_model(args, device)
    if dist.is_initialized():  # DDP even with one rank: its all-reduce is what gets timed
        model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda"
                                        else None)
    node = node_name(args, rank)
    hook = build_hook(args, rank, gpu_reader=injected_reader(args, node))
    if hook is not None and isinstance(model, DistributedDataParallel):
        hook.instrument_ddp(model)
    optimizer = build_optimizer(args, model)
    resilience = Resilience.from_args(args, model=model, optimizer=optimizer, node=node)
    drained: Drained | None = None
    try:
        result = train(args, model=model, optimizer=optimizer, device=device, rank=rank,
                       hook=hook, start_step=resilience.start_step, resilience=resilience)
    except Drained as exc:
        drained = exc
    finally:
        resilience.close()
        if hook is not None:
            hook.close()
    if drained is not None:
        # This process leaves: its node is drained, or the others re-rendezvous without it.
        exit_now(drained.code)
    if hook is not None and rank == 0:
        log.info("hook: %s", hook.stats)
    if args.result:
        summary = {**asdict(result), "hook": asdict(hook.stats) if hook else None,
                   "node": hook.node if hook else None, "world": world}
        with open(args.result.format(rank=rank), "w") as f:
            json.dump(summary, f)
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
