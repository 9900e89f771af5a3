"""A tiny DDP training loop with checkpoints, decision polling and drains, launched by the
tests' torchrun agents. Prints one JSON line per start and end so tests can follow it."""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from trainer.checkpoint import CheckpointConfig, Checkpointer
from trainer.decisions import DecisionConfig, DecisionPoller
from trainer.drain import DrainConfig, DrainController, Drained, exit_now


def _say(**fields: Any) -> None:
    print(json.dumps({"t": time.time(), **fields}), flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--endpoint", required=True)
    p.add_argument("--job", default="elastic-test")
    p.add_argument("--ckpt-dir", type=Path, required=True)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--step-s", type=float, default=0.1)
    p.add_argument("--every", type=int, default=10)
    p.add_argument("--min-nodes", type=int, default=1)
    p.add_argument("--die-in-drain", default="", help="this node dies while checkpointing")
    p.add_argument("--hold-until-world", type=int, default=0,
                   help="keep training past --steps until the world has this many ranks")
    args = p.parse_args()

    node = os.environ["FORESHOCK_NODE"]
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 16))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    # Saves of this tiny model take well under a second: a rank that has not answered within
    # 20 s is gone (the default, 10 minutes, leaves room for the writes of a large model).
    ckpt = Checkpointer(CheckpointConfig(dir=args.ckpt_dir, every_steps=args.every,
                                         timeout_s=20.0), model=model, optimizer=opt)
    if node == args.die_in_drain:
        save = ckpt.save

        def dying_save(**kw: Any) -> Any:
            if str(kw.get("reason", "")).startswith("drain"):
                _say(event="dies", node=node)
                os.kill(os.getppid(), signal.SIGKILL)  # the whole node: its agent, then us
                os.kill(os.getpid(), signal.SIGKILL)
            return save(**kw)

        ckpt.save = dying_save  # type: ignore[method-assign]
    resumed = ckpt.resume()
    start = resumed.step if resumed is not None else 0
    poller = DecisionPoller(DecisionConfig(endpoint=args.endpoint, job=args.job,
                                           poll_interval_s=0.5, agree_every_steps=2,
                                           min_nodes=args.min_nodes))
    drain = DrainController(
        DrainConfig(node=node, local_rank=int(os.environ["LOCAL_RANK"]),
                    agent_pid=os.getppid(), min_nodes=args.min_nodes),
        checkpointer=ckpt, poller=poller, resumed=resumed)
    world = dist.get_world_size()
    _say(event="start", node=node, rank=dist.get_rank(), world=world, step=start)
    try:
        step = start
        while step < args.steps or (world < args.hold_until_world and step < 3000):
            loss = model(torch.randn(8, 16)).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            time.sleep(args.step_s)
            step += 1
            ckpt.maybe_save(step=step, data_position=step * 8 * world)
            drain.after_step(step=step, data_position=step * 8 * world)
        _say(event="end", node=node, rank=dist.get_rank(), world=world, step=step)
    except Drained as exc:
        ckpt.close()
        poller.close()
        exit_now(exc.code)
    ckpt.close()
    poller.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
