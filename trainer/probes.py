"""Link probes: point-to-point bandwidth and latency between nodes (each node's ring neighbour
plus a rotating peer), at step indices every rank agrees on, within a budget of training time."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from trainer.collectives import CollectiveTimer

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class LinkResult:
    """One probe of the link from this node to ``peer``."""

    peer: str
    bandwidth_bps: float
    """Bytes per second."""
    latency_s: float


@dataclass(frozen=True, kw_only=True, slots=True)
class ProbePlan:
    """Who probes: the lowest rank of each node (its leader), in rank order."""

    node: str
    leaders: tuple[int, ...]
    nodes: tuple[str, ...]
    """Node of each leader, same order."""

    @classmethod
    def from_nodes(cls, node: str, nodes_by_rank: list[str]) -> ProbePlan:
        leaders: dict[str, int] = {}
        for r, n in enumerate(nodes_by_rank):
            leaders.setdefault(n, r)
        return cls(node=node, leaders=tuple(leaders.values()), nodes=tuple(leaders))

    def peers(self, index: int, round_: int) -> list[tuple[int, int]]:
        """(offset to send to, offset to receive from) for this round: ring + rotating peer."""
        n = len(self.leaders)
        offsets = [1] + ([2 + round_ % (n - 2)] if n > 2 else [])
        return [((index + k) % n, (index - k) % n) for k in offsets]


class LinkProber:
    """Runs probe rounds from the training thread at agreed steps; every rank must call
    `maybe_probe` once per step with the same step index."""

    def __init__(self, plan: ProbePlan, *, rank: int, interval_s: float, budget: float,
                 nbytes: int, device: torch.device, timer: CollectiveTimer,
                 first_step: int = 10) -> None:
        self.plan = plan
        self.rank = rank
        self.interval_s = interval_s
        self.budget = budget
        self.nbytes = nbytes
        self.device = device
        self.timer = timer
        self.next_step = first_step
        self.rounds = 0
        self.total_cost_s = 0.0
        self._last_cost_s = 0.0
        self._bufs: tuple[torch.Tensor, torch.Tensor] | None = None

    @property
    def enabled(self) -> bool:
        return len(self.plan.leaders) > 1 and self.interval_s > 0

    def maybe_probe(self, step: int, step_time_s: float) -> list[LinkResult]:
        """Probe if ``step`` is the agreed one; returns this node's results (leaders only)."""
        if not self.enabled or step < self.next_step:
            return []
        t0 = time.perf_counter()
        with self.timer.paused():
            agreed = torch.tensor([step_time_s, self._last_cost_s], dtype=torch.float64,
                                  device=self.device)
            dist.all_reduce(agreed, op=dist.ReduceOp.MAX)
            step_max, cost_max = (float(v) for v in agreed.tolist())
            results = self._probe_links() if self.rank in self.plan.leaders else []
        self._last_cost_s = time.perf_counter() - t0
        self.total_cost_s += self._last_cost_s
        # Every rank computes the same next step from the same all-reduced inputs.
        wait_s = max(self.interval_s, cost_max / self.budget)
        self.next_step = step + max(1, math.ceil(wait_s / max(step_max, 1e-6)))
        self.rounds += 1
        return results

    def _probe_links(self) -> list[LinkResult]:
        index = self.plan.leaders.index(self.rank)
        if self._bufs is None:
            self._bufs = (torch.zeros(self.nbytes, dtype=torch.uint8, device=self.device),
                          torch.zeros(self.nbytes, dtype=torch.uint8, device=self.device))
        send_buf, recv_buf = self._bufs
        out = []
        for to, frm in self.plan.peers(index, self.rounds):
            latency = min(self._exchange(send_buf[:8], recv_buf[:8], to, frm) for _ in range(3))
            elapsed = self._exchange(send_buf, recv_buf, to, frm)
            out.append(LinkResult(peer=self.plan.nodes[to], latency_s=latency,
                                  bandwidth_bps=self.nbytes / max(elapsed, 1e-9)))
        return out

    def _exchange(self, send: torch.Tensor, recv: torch.Tensor, to: int, frm: int) -> float:
        ops: list[Any] = [dist.P2POp(dist.isend, send, self.plan.leaders[to]),
                          dist.P2POp(dist.irecv, recv, self.plan.leaders[frm])]
        t0 = time.perf_counter()
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        if send.is_cuda:  # Probes are rare; one host sync here is the price of a wall time.
            torch.cuda.current_stream().synchronize()
        return time.perf_counter() - t0
