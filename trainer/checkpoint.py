"""Checkpoints with torch.distributed.checkpoint: model, optimizer, step, data position and RNG
state; periodic (asynchronous) and on demand (blocking); resume from the newest complete one.

Layout: ``<dir>/step-00000120/`` holds DCP's files and, written last by rank 0 once every rank's
data is on disk, ``foreshock.json`` (step, world size, reason...). A directory without it is an
interrupted save and is ignored, so a node failing mid-save never leaves a checkpoint that
looks complete.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import time
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

log = logging.getLogger("foreshock.checkpoint")

MARKER = "foreshock.json"


@dataclass(frozen=True, kw_only=True)
class CheckpointConfig:
    """Where and how often to checkpoint."""

    dir: Path
    """Directory of the job's checkpoints (shared by every node)."""
    every_steps: int = 0
    """Periodic checkpoint every this many steps; 0 saves only on demand."""
    async_save: bool = True
    """Periodic saves write in a background thread after a quick copy to CPU memory."""
    keep: int = 3
    """Complete checkpoints kept; older ones are deleted."""
    timeout_s: float = 600.0
    """Longest any rank waits on another within a save or load (the collective timeout of the
    checkpoint's gloo group). A rank that died or stopped answering mid-save fails the save on
    the others after this long instead of torch's 30 minutes, so that torchrun restarts the job
    from the newest complete checkpoint. Leave room for the slowest rank's write."""

    def __post_init__(self) -> None:
        if self.every_steps < 0:
            raise ValueError(f"checkpoint.every_steps={self.every_steps} must be >= 0")
        if self.keep < 1:
            raise ValueError(f"checkpoint.keep={self.keep} must be >= 1")
        if not 0 < self.timeout_s < math.inf:  # NaN fails too
            raise ValueError(f"checkpoint.timeout_s={self.timeout_s} must be > 0 seconds and "
                             "finite")


@dataclass(frozen=True, kw_only=True)
class CheckpointInfo:
    """A complete checkpoint: training resumes at ``step`` reading from ``data_position``."""

    step: int
    """Steps completed when it was taken: the next step to run."""
    data_position: int
    """Samples the whole job had consumed: where the data loader resumes."""
    world_size: int
    reason: str
    """``periodic``, or why it was taken on demand (``drain node-c``)."""
    saved_at: float
    path: Path
    extra: dict[str, Any] = field(default_factory=dict)
    """What the caller attached (a drain record)."""

    @classmethod
    def read(cls, path: Path) -> CheckpointInfo | None:
        try:
            raw = json.loads((path / MARKER).read_text())
            return cls(path=path, **{k: v for k, v in raw.items() if k != "path"})
        except (OSError, ValueError, TypeError):
            return None


def latest(directory: Path) -> CheckpointInfo | None:
    """The newest complete checkpoint in ``directory``."""
    infos = [i for p in sorted(directory.glob("step-*")) if (i := CheckpointInfo.read(p))]
    return max(infos, key=lambda i: (i.step, i.saved_at), default=None)


class Checkpointer:
    """Saves and restores one training process's share of the job's state.

    Collective: every rank constructs it, and calls ``resume``, ``maybe_save`` and ``save`` at
    the same steps. Saves use a gloo group of their own so that an asynchronous save's
    collectives never interleave with the training's.
    """

    def __init__(self, config: CheckpointConfig, *, model: torch.nn.Module,
                 optimizer: torch.optim.Optimizer) -> None:
        self.config = config
        self.model, self.optimizer = model, optimizer
        self.rank = dist.get_rank() if dist.is_initialized() else 0
        self.world_size = dist.get_world_size() if dist.is_initialized() else 1
        self._group = (dist.new_group(backend="gloo", timeout=timedelta(seconds=config.timeout_s))
                       if dist.is_initialized() else None)
        self._pending: tuple[Future[Any], CheckpointInfo] | None = None
        self._completed_step: int | None = None
        """The step of the newest checkpoint this process completed."""
        config.dir.mkdir(parents=True, exist_ok=True)

    def _state_dict(self, *, step: int, data_position: int) -> dict[str, Any]:
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        return {
            "model": model_sd,
            "optim": optim_sd,
            "train": {"step": torch.tensor(step), "data_position": torch.tensor(data_position)},
            f"rng/{self.rank}": torch.get_rng_state(),
        }

    def resume(self) -> CheckpointInfo | None:
        """Load the newest complete checkpoint into the model and optimizer, if any."""
        info = latest(self.config.dir)
        if info is None:
            return None
        state = self._state_dict(step=0, data_position=0)
        if self.rank >= info.world_size:
            # More ranks than when it was saved: this rank keeps its freshly seeded RNG.
            del state[f"rng/{self.rank}"]
        dcp.load(state, checkpoint_id=info.path, process_group=self._group)
        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optim"])
        if f"rng/{self.rank}" in state:
            torch.set_rng_state(state[f"rng/{self.rank}"])
        step, position = int(state["train"]["step"]), int(state["train"]["data_position"])
        log.info("resumed from %s at step %d", info.path, step)
        return CheckpointInfo(**{**asdict(info), "step": step, "data_position": position})

    def should_save(self, step: int) -> bool:
        return self.config.every_steps > 0 and step > 0 and step % self.config.every_steps == 0

    def maybe_save(self, *, step: int, data_position: int) -> None:
        """The periodic checkpoint, when ``step`` is due (asynchronous if configured)."""
        self._maybe_finish()
        if not self.should_save(step):
            return
        if self.config.async_save:
            if self._pending is not None:  # the previous one is still writing: finish it first
                self._finish(self._pending)
            info = self._info(step=step, data_position=data_position, reason="periodic")
            state = self._state_dict(step=step, data_position=data_position)
            future = dcp.async_save(state, checkpoint_id=info.path, process_group=self._group)
            self._pending = (future, info)  # type: ignore[assignment]
        else:
            self.save(step=step, data_position=data_position, reason="periodic")

    def save(self, *, step: int, data_position: int, reason: str,
             extra: dict[str, Any] | None = None) -> CheckpointInfo:
        """Checkpoint now and return once it is complete on every rank.

        Raises on the ranks still there when a rank dies or does not answer within
        ``timeout_s``; a checkpoint not wholly written is never marked complete.
        """
        if self._pending is not None:
            self._finish(self._pending)
        info = self._info(step=step, data_position=data_position, reason=reason, extra=extra)
        # A periodic checkpoint of this very step holds the same state in the same folder: it
        # is only marked as this one. Its files are never written twice, so a rank dying now
        # cannot leave a folder marked complete that holds half of a second write.
        if self._completed_step != step:
            state = self._state_dict(step=step, data_position=data_position)
            dcp.save(state, checkpoint_id=info.path, process_group=self._group)
        self._complete(info)
        if self._group is not None:
            dist.barrier(group=self._group)  # every rank knows it is complete before it returns
        return info

    def close(self) -> None:
        """Wait for an asynchronous save still writing."""
        if self._pending is not None:
            self._finish(self._pending)

    def _info(self, *, step: int, data_position: int, reason: str,
              extra: dict[str, Any] | None = None) -> CheckpointInfo:
        return CheckpointInfo(step=step, data_position=data_position, world_size=self.world_size,
                              reason=reason, saved_at=time.time(),
                              path=self.config.dir / f"step-{step:08d}", extra=extra or {})

    def _maybe_finish(self) -> None:
        if self._pending is not None and self._pending[0].done():
            self._finish(self._pending)

    def _finish(self, pending: tuple[Future[Any], CheckpointInfo]) -> None:
        self._pending = None
        future, info = pending
        future.result()
        self._complete(info)

    def _complete(self, info: CheckpointInfo) -> None:
        self._completed_step = info.step
        if self.rank != 0:
            return
        # DCP's coordinator (rank 0) returns only after every rank's data was written.
        record = {k: v for k, v in asdict(info).items() if k != "path"}
        record["saved_at"] = time.time()
        tmp = info.path / f".{MARKER}.tmp"
        tmp.write_text(json.dumps(record, indent=1))
        os.replace(tmp, info.path / MARKER)
        log.info("checkpoint %s complete (%s)", info.path.name, info.reason)
        self._prune()

    def _prune(self) -> None:
        complete = sorted((i for p in self.config.dir.glob("step-*")
                           if (i := CheckpointInfo.read(p))), key=lambda i: i.step)
        for old in complete[:-self.config.keep]:
            shutil.rmtree(old.path, ignore_errors=True)
