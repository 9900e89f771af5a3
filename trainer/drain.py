"""The drain controller: on an agreed decision, checkpoint every rank, then make the node leave
in a way that keeps torchrun's elastic job going on the others.

How the node leaves (measured with torch 2.13, gloo, c10d rendezvous):
- A worker that exits 0 tells its agent the node *finished*, which freezes membership and later
  closes the rendezvous. So the drained node's local rank 0 kills its own agent: an agent that
  dies of a signal does not shut the rendezvous down, it just stops heart-beating.
- The other ranks exit with ``EXIT_REJOIN``; their agents count a failure, restart their
  workers and re-rendezvous without the drained node (``--nnodes=MIN:MAX``), and the workers
  resume from the checkpoint just written. Give torchrun ``--max-restarts`` for it.
- If the node dies first, the same restart happens from the newest checkpoint there is, and
  the decision is reported failed.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch.distributed as dist

from trainer.checkpoint import Checkpointer, CheckpointInfo
from trainer.decisions import Decision, DecisionPoller

log = logging.getLogger("foreshock.drain")

EXIT_REJOIN = 75
"""Exit status of the ranks that stay: their agents restart them in the next rendezvous round."""
EVENTS = "events.jsonl"


class Drained(SystemExit):
    """Raised out of the training loop after a drain: this process must exit now."""


def exit_now(code: int | str | None) -> None:
    """Exit at once with ``code`` after flushing output (the caller has cleaned up).

    Interpreter teardown with torch loaded takes ~1.5 s, which the remaining nodes would
    spend waiting to re-rendezvous.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code if isinstance(code, int) else 1)


@dataclass(frozen=True, kw_only=True)
class DrainConfig:
    """Who this process is, as the drain needs to know it."""

    node: str
    """This process's node, as the hook reports it."""
    local_rank: int = 0
    agent_pid: int | None = None
    """The torchrun agent's pid (the parent of a worker); None when not under torchrun."""
    min_nodes: int = 1
    """Never leave fewer nodes than this (torchrun's ``--nnodes`` MIN)."""

    def __post_init__(self) -> None:
        if not self.node:
            raise ValueError("drain.node must not be empty")
        if self.min_nodes < 1:
            raise ValueError(f"drain.min_nodes={self.min_nodes} must be >= 1")


def read_events(directory: Path) -> list[dict[str, Any]]:
    """The job's drain record: decisions seen, checkpoints, drains, resumptions, in order."""
    path = directory / EVENTS
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class DrainController:
    """Acts on decisions at agreed steps. Collective: every rank calls ``after_step``."""

    def __init__(self, config: DrainConfig, *, checkpointer: Checkpointer,
                 poller: DecisionPoller | None, resumed: CheckpointInfo | None) -> None:
        self.config, self.checkpointer, self.poller = config, checkpointer, poller
        self.rank = dist.get_rank() if dist.is_initialized() else 0
        names: list[object] = [config.node]
        if dist.is_initialized():
            names = [None] * dist.get_world_size()
            dist.all_gather_object(names, config.node)
        self.nodes = sorted({str(n) for n in names})
        self._resumed = resumed
        self._first_step = True
        self._reported: set[int] = set()

    def record(self, event: str, **fields: Any) -> None:
        """Append one event to the job's drain record (rank 0)."""
        if self.rank != 0:
            return
        line = json.dumps({"ts": time.time(), "event": event, **fields})
        with (self.checkpointer.config.dir / EVENTS).open("a") as f:
            f.write(line + "\n")

    def after_step(self, *, step: int, data_position: int) -> None:
        """Call after each optimizer step with the number of steps completed."""
        if self._first_step:
            self._first_step = False
            self._on_resumed(step)
        if self.poller is None:
            return
        self._fail_orphans()
        decision = self.poller.agree(step)
        if decision is not None:
            self.drain(decision, step=step, data_position=data_position)

    def _on_resumed(self, step: int) -> None:
        info = self._resumed
        world_size = dist.get_world_size() if dist.is_initialized() else 1
        self.record("started", step=step, nodes=self.nodes, world_size=world_size,
                    checkpoint=None if info is None else info.path.name)
        drain = (info.extra.get("drain") if info is not None else None) or None
        if drain is None or self.poller is None:
            return
        note = (f"checkpointed at step {drain['step']}, node {drain['node']} drained, training "
                f"resumed on {len(self.nodes)} node(s) ({', '.join(self.nodes)}) at step {step}")
        self.record("resumed", step=step, decision=drain["decision"], node=drain["node"],
                    nodes=self.nodes)
        self.poller.report(drain["decision"], "done", step=drain["step"], note=note)
        self._reported.add(drain["decision"])

    def _fail_orphans(self) -> None:
        # A decision acknowledged by an earlier incarnation whose node is gone: it failed
        # before the drain completed and the job restarted from its newest checkpoint.
        assert self.poller is not None
        for d in self.poller.open_decisions:
            if d.id in self._reported or d.node in self.nodes:
                continue
            resumed = self._resumed.step if self._resumed is not None else 0
            note = (f"node {d.node} left before the drain completed; the job restarted "
                    f"elastically from its newest checkpoint (step {resumed})")
            self.record("drain_failed", decision=d.id, node=d.node, resumed_step=resumed)
            self.poller.report(d.id, "failed", note=note)
            self._reported.add(d.id)

    def drain(self, decision: Decision, *, step: int, data_position: int) -> None:
        """Checkpoint, then leave (drained node) or rejoin without it (others): raises Drained."""
        assert self.poller is not None
        self.record("decision", decision=decision.id, node=decision.node, step=step)
        refusal = self._refusal(decision)
        if refusal is not None:
            log.warning("decision %d not carried out: %s", decision.id, refusal)
            self.record("refused", decision=decision.id, node=decision.node, reason=refusal)
            self.poller.report(decision.id, "failed", step=step, note=refusal)
            return
        self.poller.report(decision.id, "acknowledged", step=step,
                           note=f"all ranks checkpoint after step {step}")
        started = time.time()
        record = {"decision": decision.id, "node": decision.node, "step": step}
        try:
            info = self.checkpointer.save(step=step, data_position=data_position,
                                          reason=f"drain {decision.node}", extra={"drain": record})
        except Exception:
            log.error("drain of %s: the checkpoint after step %d did not complete (did a node "
                      "leave mid-save?); this process fails so that torchrun restarts the job "
                      "from its newest complete checkpoint", decision.node, step)
            raise
        self.record("checkpoint", step=step, path=info.path.name, reason=info.reason,
                    duration_s=round(time.time() - started, 3))
        self.record("drain", **record, nodes_left=[n for n in self.nodes if n != decision.node])
        self._leave(decision)

    def _refusal(self, decision: Decision) -> str | None:
        if decision.node not in self.nodes:
            return f"node {decision.node} hosts no rank of this job ({', '.join(self.nodes)})"
        if len(self.nodes) - 1 < self.config.min_nodes:
            return (f"draining {decision.node} would leave {len(self.nodes) - 1} node(s), below "
                    f"the job's minimum of {self.config.min_nodes}")
        if self.config.agent_pid is None:
            return "not running under torchrun's elastic agent: the node cannot leave elastically"
        return None

    def _leave(self, decision: Decision) -> None:
        assert self.poller is not None
        self.poller.close()  # flush the ack before this process goes
        if self.config.node != decision.node:
            raise Drained(EXIT_REJOIN)
        time.sleep(0.2)  # local rank 0 stops the agent before any of us could exit
        if self.config.local_rank == 0 and self.config.agent_pid is not None:
            log.warning("node %s drained: stopping its torchrun agent (pid %d)",
                        decision.node, self.config.agent_pid)
            # SIGKILL, not SIGTERM: a terminated agent heart-beats on while it waits for its
            # workers, and the others cannot re-rendezvous before that heartbeat expires.
            # Either way the agent does not close the rendezvous. Its workers (sessions of
            # their own) exit by themselves once the training loop has cleaned up.
            os.kill(self.config.agent_pid, signal.SIGKILL)
        # Cleanup that hangs must not leave this process behind on a drained node.
        watchdog = threading.Timer(30.0, os._exit, args=(0,))
        watchdog.daemon = True
        watchdog.start()
        raise Drained(0)
