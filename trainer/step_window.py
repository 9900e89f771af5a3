"""`StepWindow`: step, compute and collective-wait time summed on the training thread and
read as per-window means by the exporter."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from trainer.collectives import CollectiveRecord


@dataclass(frozen=True, kw_only=True, slots=True)
class WindowSummary:
    """Means over the steps of one export window."""

    steps: int
    step_mean_s: float
    compute_mean_s: float
    wait_mean_s: float


def exposed_wait_s(records: Sequence[CollectiveRecord]) -> float:
    """Time the step spent waiting in collectives.

    A blocking collective is waited for in full. Asynchronous ones (DDP's gradient buckets)
    overlap the backward pass; they run in issue order, so the step waits from the issue of
    the last one until it completes: that collective's duration. A rank that is slower than
    its peers issues its last bucket late and barely waits; its peers wait for it.
    """
    wait = 0.0
    last_async: dict[int, float] = {}
    for rec in records:
        if rec.exposed_s is not None:
            wait += rec.exposed_s * rec.weight
            continue
        d = rec.duration_s or 0.0
        if rec.is_async:
            last_async[rec.step] = d
        else:
            wait += d
    return wait + sum(last_async.values())


class StepWindow:
    """Accumulates steps until the exporter takes the window."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._steps = 0
        self._step_s = 0.0
        self._wait_s = 0.0

    def add_step(self, duration_s: float, records: Sequence[CollectiveRecord]) -> None:
        wait = exposed_wait_s(records) if records else 0.0
        with self._lock:
            self._steps += 1
            self._step_s += duration_s
            self._wait_s += wait

    def take(self) -> WindowSummary | None:
        """The window since the last call (None when no step ended in it)."""
        with self._lock:
            steps, step_s, wait_s = self._steps, self._step_s, self._wait_s
            self._steps, self._step_s, self._wait_s = 0, 0.0, 0.0
        if not steps:
            return None
        wait = min(wait_s, step_s)
        return WindowSummary(steps=steps, step_mean_s=step_s / steps,
                             compute_mean_s=(step_s - wait) / steps, wait_mean_s=wait / steps)
