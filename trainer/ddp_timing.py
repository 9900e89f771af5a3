"""`DdpRuntimeSampler`: DDP's gradient all-reduce timed by DDP's own sampled runtime timers
(CUDA events in C++), for GPUs, where a Python comm hook per bucket would cost ~1.6% of a step."""

from __future__ import annotations

from typing import Any

import torch

from trainer.collectives import CollectiveRecord, group_label


class DdpRuntimeSampler:
    """Reads the backward communication time DDP measures itself every ``every_steps`` steps.

    One record per sampled step stands for the whole gradient all-reduce of that step (every
    bucket): ``duration_s`` from the first bucket's launch to the last one's completion,
    ``exposed_s`` the part that did not overlap the backward pass, ``weight`` the steps it
    stands for. No Python runs on DDP's hot path.
    """

    def __init__(self, model: torch.nn.Module, *, every_steps: int) -> None:
        if every_steps < 1:
            raise ValueError(f"ddp sample every_steps={every_steps} must be >= 1")
        ddp: Any = model
        self.model = ddp
        self.every_steps = every_steps
        self.group = group_label(getattr(model, "process_group", None))
        self.nbytes = sum(p.numel() * p.element_size() for p in model.parameters()
                          if p.requires_grad)
        self._last_start = 0
        ddp._set_ddp_runtime_logging_sample_rate(every_steps)

    def poll(self, step: int) -> CollectiveRecord | None:
        """The newest sample, once (None when DDP took no new one)."""
        data = self.model._get_ddp_logging_data()
        start = int(data.get("backward_comm_time_start", 0) or 0)
        comm_ns = int(data.get("backward_comm_time", 0) or 0)
        if not start or start == self._last_start or comm_ns <= 0:
            return None
        self._last_start = start
        overlap_ns = int(data.get("backward_compute_comm_overlap_time", 0) or 0)
        rec = CollectiveRecord("all_reduce", self.group, self.nbytes, is_async=True, step=step,
                               cuda=False)
        rec.end = rec.start + comm_ns / 1e9
        rec.exposed_s = max(0, comm_ns - overlap_ns) / 1e9
        rec.weight = self.every_steps
        return rec
