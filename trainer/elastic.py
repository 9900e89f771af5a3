"""A local elastic job: one torchrun agent per simulated node on this machine, with the
rendezvous store hosted apart from the agents, tuned so a node that leaves costs seconds.

Settings measured with torch 2.13 and gloo (3 agents, one worker each):
- ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` on every agent: with the shared store a single
  worker failure cascaded until every agent had spent its restarts (pytorch/pytorch#135712).
- The c10d store lives in this (the launching) process, ``is_host=false`` for every agent: an
  agent hosting it would take the whole job down when its node is drained.
- ``last_call_timeout``/``keep_alive_*`` tuned: a drained node's agent stops heart-beating and
  the others re-rendezvous in ~4 s instead of ~44 s; first step on the remaining nodes ~6-10 s
  after the drain checkpoint (most of it is the new workers importing torch).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from types import TracebackType

import torch.distributed as dist

from trainer import exit_with_parent


@dataclass(frozen=True, kw_only=True)
class ElasticConfig:
    """The job's shape and its rendezvous tuning."""

    nodes: tuple[str, ...]
    """Names of the simulated nodes, one torchrun agent each (``FORESHOCK_NODE``)."""
    min_nodes: int
    """torchrun ``--nnodes MIN``: the job continues while this many remain."""
    nproc_per_node: int = 1
    max_restarts: int = 3
    """Each drain and each failure costs the remaining agents one restart."""
    run_id: str = "foreshock"
    last_call_timeout_s: int = 1
    """Wait for more nodes after MIN joined; short so a re-rendezvous after a drain is quick.
    (Agents launched together join within milliseconds, and MAX completes a round at once.)"""
    keep_alive_interval_s: int = 1
    keep_alive_max_attempt: int = 3
    """A node is dead after interval x attempts without a heartbeat. Not 2: a healthy agent
    heart-beats every 1-2 s, so with 2 the others evict it at random and a node that later
    joins starts a round nobody else is in."""
    join_timeout_s: int = 120
    monitor_interval_s: float = 0.5

    def __post_init__(self) -> None:
        if not self.nodes or len(set(self.nodes)) != len(self.nodes):
            raise ValueError(f"elastic.nodes={self.nodes} must be distinct and not empty")
        if not 1 <= self.min_nodes <= len(self.nodes):
            raise ValueError(f"elastic.min_nodes={self.min_nodes} must be in 1..{len(self.nodes)}")

    @property
    def rdzv_conf(self) -> str:
        return (f"is_host=false,last_call_timeout={self.last_call_timeout_s},"
                f"keep_alive_interval={self.keep_alive_interval_s},"
                f"keep_alive_max_attempt={self.keep_alive_max_attempt},"
                f"join_timeout={self.join_timeout_s}")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ElasticCluster:
    """Starts the agents, lets one be killed like a failing node, and cleans everything up."""

    def __init__(self, config: ElasticConfig, *, argv: list[str], log_dir: Path,
                 env: dict[str, str] | None = None) -> None:
        """``argv``: the training script and its arguments, as torchrun takes them."""
        self.config, self.argv, self.log_dir = config, argv, log_dir
        self.env = {**os.environ, **(env or {})}
        self.agents: dict[str, subprocess.Popen[bytes]] = {}
        self._store: dist.TCPStore | None = None
        self.port = 0

    def __enter__(self) -> ElasticCluster:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self._store = dist.TCPStore("127.0.0.1", self.port, is_master=True, multi_tenant=True,
                                    wait_for_workers=False, timeout=timedelta(seconds=60))
        for node in self.config.nodes:
            self.start_node(node)

    def command(self, node: str) -> list[str]:
        c = self.config
        # torchrun's own log directory defaults to a /tmp/torchelastic_* it never removes.
        return exit_with_parent.command(
            "torch.distributed.run", f"--log-dir={self.log_dir / 'torchelastic' / node}",
            f"--nnodes={c.min_nodes}:{len(c.nodes)}", f"--nproc-per-node={c.nproc_per_node}",
            f"--max-restarts={c.max_restarts}", f"--monitor-interval={c.monitor_interval_s}",
            "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{self.port}",
            f"--rdzv-id={c.run_id}", f"--rdzv-conf={c.rdzv_conf}", *self.argv)

    def start_node(self, node: str) -> None:
        """Start (or restart: a drained node that proved healthy rejoins) ``node``'s agent."""
        env = {**self.env, "FORESHOCK_NODE": node, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
               "OMP_NUM_THREADS": self.env.get("OMP_NUM_THREADS", "1")}
        log = self.log_path(node).open("ab")
        # A session of its own per agent: killing the node kills its workers too.
        self.agents[node] = subprocess.Popen(self.command(node), env=env, stdout=log,
                                             stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

    def kill_node(self, node: str) -> None:
        """The node dies at once: agent and workers, no goodbye (SIGKILL)."""
        for pid in self._processes(node):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def _processes(self, node: str) -> list[int]:
        """The node's agent and everything it started (workers run in sessions of their own)."""
        agent = self.agents[node].pid
        children: dict[int, list[int]] = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                pid = int(stat.parent.name)
                ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(pid)
        found, todo = [], [agent]
        while todo:
            pid = todo.pop()
            found.append(pid)
            todo.extend(children.get(pid, []))
        return found

    def running(self) -> list[str]:
        return [n for n, p in self.agents.items() if p.poll() is None]

    def wait(self, timeout_s: float) -> dict[str, int | None]:
        """Wait until every agent exited (or the timeout); their exit statuses."""
        deadline = time.monotonic() + timeout_s
        while self.running() and time.monotonic() < deadline:
            time.sleep(0.2)
        return {n: p.poll() for n, p in self.agents.items()}

    def log_path(self, node: str) -> Path:
        """Where ``node``'s agent and workers write (stdout and stderr, appended on a restart)."""
        return self.log_dir / f"{node}.log"

    def log(self, node: str) -> str:
        return self.log_path(node).read_text(errors="replace")

    def tails(self, lines: int = 30) -> str:
        """The last ``lines`` lines of every node's log (agent and workers), for a failure
        report: what each agent was doing when the job did not end as expected."""
        out = []
        for node in self.config.nodes:
            text = self.log(node).splitlines() if self.log_path(node).exists() else []
            out.append(f"--- {node} (last {min(lines, len(text))} of {len(text)} lines)")
            out.extend(text[-lines:])
        return "\n".join(out)

    def stop(self) -> None:
        """Stop every agent and worker still running, then the store."""
        left = {node: self._processes(node) for node in self.running()}
        for node in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.agents[node].pid, signal.SIGTERM)  # it stops its workers
        deadline = time.monotonic() + 10
        while self.running() and time.monotonic() < deadline:
            time.sleep(0.1)
        for pids in left.values():
            for pid in pids:  # whatever did not stop in time
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for proc in self.agents.values():
            proc.wait()
        self._store = None
