"""Sampled kernel profiles: torch.profiler on one step every N, summarized off the training
thread into the top-k kernels by total time (CPU ops on CPU, CUDA kernels on GPU)."""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

log = logging.getLogger(__name__)

_SKIP_PREFIXES = ("ProfilerStep", "[memory]", "[OutOfMemory]")
_MAX_NAME = 160
# Kineto (torch's profiler backend) prints two "USDT: ... profiler_start/stop" lines to stderr
# at every profile at any level it reads below 6 (its levels: 0 verbose .. 4 error, 5 USDT):
# two lines per rank every sampled step, in logs the user did not ask the hook to write. Kineto
# reads the variable when it first starts, so it is set (unless the user set it) before that.
_KINETO_QUIET = "6"


def summarize(prof: Any, *, top_k: int, cuda: bool) -> list[tuple[str, float]]:
    """Top-k (kernel name, total seconds) of a finished profile."""
    totals: dict[str, float] = {}
    for ev in prof.key_averages():
        name = str(ev.key)
        if name.startswith(_SKIP_PREFIXES):
            continue
        if cuda:
            if "CUDA" not in str(getattr(ev, "device_type", "")):
                continue
            us = getattr(ev, "self_device_time_total", None)
            if us is None:
                us = getattr(ev, "self_cuda_time_total", 0.0)
        else:
            us = ev.self_cpu_time_total
        if us and us > 0:
            totals[name[:_MAX_NAME]] = totals.get(name[:_MAX_NAME], 0.0) + float(us) / 1e6
    return sorted(totals.items(), key=lambda kv: kv[1], reverse=True)[:top_k]


class StepProfiler:
    """Profiles step ``first_step`` and every ``every_steps`` after it; the newest summary waits
    in `take` for the exporter."""

    def __init__(self, *, every_steps: int, top_k: int, cuda: bool, first_step: int = 20) -> None:
        if every_steps < 0:
            raise ValueError(f"hook.profile_every_steps={every_steps} must be >= 0 (0 disables)")
        if top_k < 1:
            raise ValueError(f"hook.profile_top_k={top_k} must be >= 1")
        self.every_steps = every_steps
        self.top_k = top_k
        self.cuda = cuda
        self.first_step = first_step
        if every_steps:
            os.environ.setdefault("KINETO_LOG_LEVEL", _KINETO_QUIET)
        self.profiled_steps = 0
        self._warned_empty = False
        self._prof: Any = None
        self._lock = threading.Lock()
        self._summary: list[tuple[str, float]] | None = None
        self._worker: threading.Thread | None = None

    def should_profile(self, step: int) -> bool:
        if self.every_steps == 0 or step < self.first_step:
            return False
        if (step - self.first_step) % self.every_steps:
            return False
        # Skip a turn rather than queue a second summary behind a slow one.
        return self._worker is None or not self._worker.is_alive()

    def start(self) -> None:
        activities = [ProfilerActivity.CPU]
        if self.cuda:
            activities.append(ProfilerActivity.CUDA)
        self._prof = profile(activities=activities, record_shapes=False, with_stack=False)
        self._prof.__enter__()

    @property
    def active(self) -> bool:
        return self._prof is not None

    def stop(self) -> None:
        """End the profiled step and summarize it on a background thread."""
        prof, self._prof = self._prof, None
        if prof is None:
            return
        prof.__exit__(None, None, None)
        self.profiled_steps += 1
        self._worker = threading.Thread(target=self._summarize, args=(prof,),
                                        name="foreshock-profile", daemon=True)
        self._worker.start()

    def _summarize(self, prof: Any) -> None:
        try:
            summary = summarize(prof, top_k=self.top_k, cuda=self.cuda)
        except Exception:
            # A background summary: log and carry on; the next sampled step tries again.
            log.exception("foreshock: summarizing a profiled step failed")
            return
        if not summary and self.cuda and not self._warned_empty:
            # Kineto's own errors (CUPTI missing or busy) are quiet at the level set above.
            self._warned_empty = True
            log.warning("foreshock: a profiled step recorded no CUDA kernels; run with "
                        "KINETO_LOG_LEVEL=4 to see why torch.profiler saw none")
        with self._lock:
            self._summary = summary

    def take(self) -> list[tuple[str, float]]:
        """The newest summary, once (empty when none arrived since the last call)."""
        with self._lock:
            summary, self._summary = self._summary, None
        return summary or []

    def join(self, timeout: float = 10.0) -> None:
        if self._worker is not None:
            self._worker.join(timeout)

    def abort(self) -> None:
        """Stop a profile left open (the hook is closing mid-step)."""
        if self._prof is not None:
            try:
                self._prof.__exit__(None, None, None)
            finally:
                self._prof = None


def cuda_in_use() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_initialized()
