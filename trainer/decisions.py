"""The trainer's side of decisions: rank 0 polls the service in a background thread (one small
request every few seconds per job), and every few steps all ranks agree on the decision to act
on with one tiny broadcast, so no rank blocks on HTTP and no rank acts alone.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
from dataclasses import dataclass

import httpx
import torch
import torch.distributed as dist

log = logging.getLogger("foreshock.decisions")


@dataclass(frozen=True, kw_only=True)
class DecisionConfig:
    """How the trainer learns of checkpoint-and-drain decisions."""

    endpoint: str
    """Base URL of ``foreshock serve`` (``http://host:4318``)."""
    job: str
    """The job name the hook reports under."""
    token: str | None = None
    """Ingest token, if the service requires one."""
    poll_interval_s: float = 2.0
    """Rank 0 asks the service this often."""
    agree_every_steps: int = 5
    """All ranks agree on a decision every this many steps (one tiny broadcast)."""
    min_nodes: int | None = None
    """The job's minimum node count, passed to the service's policy."""
    timeout_s: float = 2.0
    """HTTP timeout of one poll or report."""

    def __post_init__(self) -> None:
        if not self.endpoint.startswith(("http://", "https://")):
            raise ValueError(f"decisions.endpoint={self.endpoint!r} must be an http(s) URL")
        for name in ("poll_interval_s", "timeout_s"):  # NaN: wait(nan) returns at once, a spin
            if not 0 < getattr(self, name) < math.inf:
                raise ValueError(f"decisions.{name}={getattr(self, name)} must be > 0 seconds "
                                 "and finite")
        if self.agree_every_steps < 1:
            raise ValueError(f"decisions.agree_every_steps={self.agree_every_steps} must be >= 1")


@dataclass(frozen=True, kw_only=True)
class Decision:
    """A decision every rank agreed on: checkpoint after ``step``, then drain ``node``."""

    id: int
    node: str
    step: int


@dataclass(frozen=True, kw_only=True)
class OpenDecision:
    """A decision as rank 0 last saw it in the service."""

    id: int
    node: str
    state: str
    step: int | None


def _open_decision(d: dict[str, object]) -> OpenDecision:
    """One decision of the service's answer, or TypeError: an id that is no int64 would raise in
    the training thread, where every rank broadcasts it."""
    did, node, state, step = d["id"], d["node"], d["state"], d.get("step")
    if not (type(did) is int and 0 < did < 2**63 and isinstance(node, str) and node
            and isinstance(state, str) and (step is None or type(step) is int)):
        raise TypeError(f"a decision that is not one: {d!r}"[:200])
    return OpenDecision(id=did, node=node, state=state, step=step)


class DecisionPoller:
    """Polls for decisions (rank 0 only) and makes every rank agree on one (collective)."""

    def __init__(self, config: DecisionConfig) -> None:
        self.config = config
        self.rank = dist.get_rank() if dist.is_initialized() else 0
        self._lock = threading.Lock()
        self._open: list[OpenDecision] = []
        self._acted: set[int] = set()
        self._reports: queue.Queue[tuple[int, str, dict[str, object]]] = queue.Queue()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._warned = False
        self._thread: threading.Thread | None = None
        if self.rank == 0:
            self._thread = threading.Thread(target=self._run, name="foreshock-decisions",
                                            daemon=True)
            self._thread.start()

    @property
    def open_decisions(self) -> list[OpenDecision]:
        """What the last poll returned (rank 0; empty elsewhere)."""
        with self._lock:
            return list(self._open)

    def agree(self, step: int) -> Decision | None:
        """Collective every ``agree_every_steps`` steps: the decision all ranks act on now."""
        if step % self.config.agree_every_steps != 0:
            return None
        chosen = next((d for d in self.open_decisions if d.id not in self._acted), None)
        if not dist.is_initialized():
            return None if chosen is None else Decision(id=chosen.id, node=chosen.node, step=step)
        flag = torch.tensor([chosen.id if chosen is not None else 0], dtype=torch.int64)
        dist.broadcast(flag, src=0)
        if int(flag.item()) == 0:
            return None
        node = [chosen.node if chosen is not None else ""]
        dist.broadcast_object_list(node, src=0)
        decision = Decision(id=int(flag.item()), node=str(node[0]), step=step)
        self._acted.add(decision.id)
        return decision

    def report(self, decision_id: int, state: str, *, step: int | None = None,
               note: str = "") -> None:
        """Queue ``ack``, ``done`` or ``failed`` for the service (rank 0; never blocks).

        A decision reported ``done`` or ``failed`` is never acted on afterwards, even while
        polls made before the report reached the service still list it as open.
        """
        if state in ("done", "failed"):
            self._acted.add(decision_id)
        if self.rank == 0:
            self._reports.put((decision_id, state, {"step": step, "note": note}))
            self._wake.set()

    def close(self, timeout_s: float = 5.0) -> None:
        """Send the queued reports (up to ``timeout_s``) and stop polling."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _url(self, path: str) -> str:
        return f"{self.config.endpoint.rstrip('/')}/api/v1/jobs/{self.config.job}/decisions{path}"

    def _run(self) -> None:
        headers = {"Authorization": f"Bearer {self.config.token}"} if self.config.token else {}
        params = {"min_nodes": self.config.min_nodes} if self.config.min_nodes else {}
        with httpx.Client(timeout=self.config.timeout_s, headers=headers) as http:
            while True:
                self._send_reports(http)
                if self._stop.is_set():
                    return
                self._poll(http, params)
                self._wake.wait(self.config.poll_interval_s)
                self._wake.clear()

    def _poll(self, http: httpx.Client, params: dict[str, int]) -> None:
        # A poll that fails is retried next interval: monitoring never stops training.
        try:
            r = http.get(self._url(""), params=params)
            r.raise_for_status()
            decisions = [_open_decision(d) for d in r.json()["decisions"]]
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            self._warn(f"decision poll failed: {exc}")
            return
        with self._lock:
            self._open = decisions

    def _send_reports(self, http: httpx.Client) -> None:
        while True:
            try:
                decision_id, state, body = self._reports.get_nowait()
            except queue.Empty:
                return
            action = {"acknowledged": "ack"}.get(state, state)
            try:
                r = http.post(self._url(f"/{decision_id}/{action}"), json=body)
                if r.status_code >= 400:
                    log.warning("decision %d: %s refused: %s", decision_id, action, r.text)
            except httpx.HTTPError as exc:
                self._warn(f"decision {decision_id}: could not report {action}: {exc}")

    def _warn(self, message: str) -> None:
        if not self._warned:
            log.warning("%s (further failures are not logged)", message)
            self._warned = True
