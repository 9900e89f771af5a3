"""Checkpoints, decision polling and drains wired into a training loop: the flags, and one
object the loop calls once per step.

    resilience = Resilience.from_args(args, model=ddp_model, optimizer=opt, node=hook.node)
    for step in range(resilience.start_step, args.steps):
        ...forward, backward, optimizer step...
        resilience.after_step(step + 1, samples=batch_size * world_size)
    resilience.close()

``after_step`` raises ``Drained`` when this process must leave (its node is drained, or the
others re-rendezvous without it); catch it at the top and call ``exit_now(exc.code)``.
"""

from __future__ import annotations

import argparse
import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from trainer.checkpoint import CheckpointConfig, Checkpointer, CheckpointInfo
from trainer.decisions import DecisionConfig, DecisionPoller
from trainer.drain import DrainConfig, DrainController


def add_flags(parser: argparse.ArgumentParser) -> None:
    """The checkpoint-and-drain flags (a group of their own)."""
    g = parser.add_argument_group("checkpoint and drain")
    a = g.add_argument
    a("--checkpoint-dir", type=Path, default=None,
      help="directory of the job's checkpoints, shared by all nodes (default: no checkpoints); "
      "training resumes from the newest complete one there")
    a("--checkpoint-every", type=int, default=0,
      help="periodic checkpoint every N steps, written asynchronously (0: only on demand)")
    a("--checkpoint-timeout", type=float, default=600.0,
      help="seconds a rank waits on the others within a save or load before the save fails "
      "(a rank died or hung) and torchrun restarts the job from the newest complete checkpoint")
    a("--decisions", action=argparse.BooleanOptionalAction, default=False,
      help="poll the service at --endpoint for checkpoint-and-drain decisions and carry them "
      "out (needs --checkpoint-dir and torchrun)")
    a("--poll-interval", type=float, default=2.0,
      help="seconds between two polls for decisions (rank 0 only)")
    a("--agree-every", type=int, default=5,
      help="all ranks agree on a decision every N steps (one tiny broadcast)")
    a("--min-nodes", type=int, default=1,
      help="never drain below this many nodes (torchrun --nnodes MIN)")
    a("--decision-token", default=None,
      help="ingest token of the service, if it requires one (default: FORESHOCK_INGEST_TOKEN)")


def flag_error(args: argparse.Namespace) -> str | None:
    """What is wrong with the checkpoint-and-drain flags, for ``parser.error``; None if fine."""
    if args.decisions and args.checkpoint_dir is None:
        return "--decisions needs --checkpoint-dir (a drain checkpoints first)"
    if args.checkpoint_every < 0:
        return f"--checkpoint-every={args.checkpoint_every} must be >= 0"
    if not 0 < args.checkpoint_timeout < math.inf:
        return f"--checkpoint-timeout={args.checkpoint_timeout} must be > 0 seconds and finite"
    if not 0 < args.poll_interval < math.inf:
        return f"--poll-interval={args.poll_interval} must be > 0 seconds and finite"
    if args.agree_every < 1:
        return f"--agree-every={args.agree_every} must be >= 1"
    if args.min_nodes < 1:
        return f"--min-nodes={args.min_nodes} must be >= 1"
    return None


@dataclass(frozen=True, kw_only=True)
class ResilienceConfig:
    """What the flags say."""

    checkpoint: CheckpointConfig | None
    decisions: DecisionConfig | None
    min_nodes: int = 1


class Resilience:
    """Resume, periodic checkpoints and drains for one training process (collective)."""

    def __init__(self, config: ResilienceConfig, *, model: torch.nn.Module,
                 optimizer: torch.optim.Optimizer, node: str) -> None:
        self.config = config
        self.checkpointer: Checkpointer | None = None
        self.drain: DrainController | None = None
        self.poller: DecisionPoller | None = None
        self.resumed: CheckpointInfo | None = None
        self.data_position = 0
        if config.checkpoint is None:
            return
        self.checkpointer = Checkpointer(config.checkpoint, model=model, optimizer=optimizer)
        self.resumed = self.checkpointer.resume()
        if self.resumed is not None:
            self.data_position = self.resumed.data_position
        if config.decisions is not None:
            self.poller = DecisionPoller(config.decisions)
        under_torchrun = "TORCHELASTIC_RUN_ID" in os.environ
        self.drain = DrainController(
            DrainConfig(node=node, local_rank=int(os.environ.get("LOCAL_RANK", "0")),
                        agent_pid=os.getppid() if under_torchrun else None,
                        min_nodes=config.min_nodes),
            checkpointer=self.checkpointer, poller=self.poller, resumed=self.resumed)

    @classmethod
    def from_args(cls, args: argparse.Namespace, *, model: torch.nn.Module,
                  optimizer: torch.optim.Optimizer, node: str) -> Resilience:
        checkpoint = None
        if args.checkpoint_dir is not None:
            checkpoint = CheckpointConfig(dir=args.checkpoint_dir,
                                          every_steps=args.checkpoint_every,
                                          timeout_s=args.checkpoint_timeout)
        decisions = None
        if problem := flag_error(args):
            raise ValueError(problem)
        if args.decisions:
            token = args.decision_token or os.environ.get("FORESHOCK_INGEST_TOKEN")
            decisions = DecisionConfig(
                endpoint=args.endpoint or "http://127.0.0.1:4318", job=args.job, token=token,
                poll_interval_s=args.poll_interval, agree_every_steps=args.agree_every,
                min_nodes=args.min_nodes)
        config = ResilienceConfig(checkpoint=checkpoint, decisions=decisions,
                                  min_nodes=args.min_nodes)
        return cls(config, model=model, optimizer=optimizer, node=node)

    @property
    def start_step(self) -> int:
        """The first step to run: 0, or where the newest checkpoint left off."""
        return self.resumed.step if self.resumed is not None else 0

    def after_step(self, step: int, *, samples: int) -> None:
        """Call after each optimizer step: ``step`` steps are complete, ``samples`` more read."""
        self.data_position += samples
        if self.checkpointer is None:
            return
        self.checkpointer.maybe_save(step=step, data_position=self.data_position)
        if self.drain is not None:
            self.drain.after_step(step=step, data_position=self.data_position)

    def close(self) -> None:
        """Finish a checkpoint still being written; stop polling."""
        if self.checkpointer is not None:
            self.checkpointer.close()
        if self.poller is not None:
            self.poller.close()
