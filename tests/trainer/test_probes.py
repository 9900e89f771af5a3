"""Link probes: who probes whom, and real probe rounds between three gloo ranks that pretend to
be three nodes, at steps every rank agrees on and within the time budget."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.conftest import free_port
from trainer.collectives import CollectiveTimer
from trainer.probes import LinkProber, ProbePlan

WORLD = 3


def test_leaders_are_the_lowest_rank_of_each_node() -> None:
    plan = ProbePlan.from_nodes("b", ["a", "a", "b", "b", "c"])
    assert plan.leaders == (0, 2, 4) and plan.nodes == ("a", "b", "c")


@pytest.mark.parametrize(("nodes", "round_", "expected"), [
    (2, 0, [(1, 1)]),  # two nodes: each other, both ways
    (4, 0, [(1, 3), (2, 2)]),  # ring neighbour, then the rotating peer
    (4, 1, [(1, 3), (3, 1)]),
    (5, 2, [(1, 4), (4, 1)]),
])
def test_ring_neighbour_plus_rotating_peer(nodes: int, round_: int,
                                           expected: list[tuple[int, int]]) -> None:
    plan = ProbePlan.from_nodes("n0", [f"n{i}" for i in range(nodes)])
    assert plan.peers(0, round_) == expected


def test_one_node_does_not_probe() -> None:
    plan = ProbePlan.from_nodes("a", ["a", "a"])
    prober = LinkProber(plan, rank=0, interval_s=1.0, budget=0.002, nbytes=64,
                        device=torch.device("cpu"), timer=CollectiveTimer())
    assert not prober.enabled and prober.maybe_probe(100, 0.1) == []


def _worker(rank: int, port: int, queue: Any) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=WORLD)
    plan = ProbePlan.from_nodes(f"node{rank}", [f"node{r}" for r in range(WORLD)])
    timer = CollectiveTimer()
    timer.install()
    out: dict[str, Any] = {}
    prober = LinkProber(plan, rank=rank, interval_s=0.02, budget=1.0, nbytes=1 << 16,
                        device=torch.device("cpu"), timer=timer, first_step=2)
    results, schedule = [], []
    for step in range(12):
        # Rank-dependent step times: the all-reduced maximum decides for every rank.
        got = prober.maybe_probe(step, 0.01 * (rank + 1))
        if got:
            schedule.append(step)
        results += [(r.peer, r.bandwidth_bps, r.latency_s) for r in got]
    out["schedule"], out["results"], out["next"] = schedule, results, prober.next_step
    out["timed_own_traffic"] = len(timer.collect())
    # A small budget stretches the interval: the probe's cost at 0.1% of training time.
    frugal = LinkProber(plan, rank=rank, interval_s=0.0001, budget=0.001, nbytes=1 << 16,
                        device=torch.device("cpu"), timer=timer, first_step=0)
    frugal.maybe_probe(0, 0.01)
    first_cost, second_at = frugal.total_cost_s, frugal.next_step
    frugal.maybe_probe(second_at, 0.01)  # the second round knows the first's cost
    out["frugal"] = (frugal.rounds, frugal.next_step - second_at, first_cost)
    timer.uninstall()
    queue.put((rank, out))
    dist.destroy_process_group()


def test_probe_rounds_between_three_nodes() -> None:
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.start_processes(_worker, args=(free_port(), queue), nprocs=WORLD, start_method="spawn")
    out = dict(queue.get() for _ in range(WORLD))
    schedules = {tuple(o["schedule"]) for o in out.values()}
    assert len(schedules) == 1, schedules  # every rank probed at the same steps
    schedule = schedules.pop()
    assert schedule[0] == 2 and len(schedule) >= 2
    assert len({o["next"] for o in out.values()}) == 1
    for rank, o in out.items():
        peers = {p for p, _, _ in o["results"]}
        assert peers == {f"node{(rank + 1) % WORLD}", f"node{(rank + 2) % WORLD}"}
        assert all(bw > 0 and 0 < lat < 1.0 for _, bw, lat in o["results"])
        assert o["timed_own_traffic"] == 0  # probes do not pollute the collective timings
        rounds, gap_steps, first_cost = o["frugal"]
        assert rounds == 2
        # The interval after round two is stretched so that a round as costly as the first
        # (the slowest rank's, agreed by all) takes <= 0.1% of training time.
        assert gap_steps * 0.01 >= first_cost / 0.001 * (1 - 1e-9)
