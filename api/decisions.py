"""Checkpoint-and-drain decisions over HTTP: the trainer's cheap poll and its reports, an
admin's cancel and repaired mark, and the list of every decision.

The trainer (rank 0 of a job, every few seconds) calls ``GET /api/v1/jobs/{job}/decisions``;
that call derives new decisions from the job's firing alerts under the configured policy, so a
decision exists as soon as someone is there to act on it.
"""

from __future__ import annotations

import logging
import shlex
import subprocess
from typing import Annotated

from fastapi import APIRouter, BackgroundTasks, Depends, HTTPException, Query, status
from pydantic import BaseModel, Field
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.decision_state import (
    STATES,
    Decision,
    DecisionState,
    DecisionStateError,
    DrainPolicy,
    derive,
    open_decisions,
    transition,
)
from api.deps import get_settings, get_store, require_admin, require_ingest_token
from api.settings import Settings, drain_argv
from collector.store import Store

log = logging.getLogger("foreshock.decisions")

router = APIRouter(prefix="/api/v1", tags=["decisions"])
StoreDep = Annotated[Store, Depends(get_store)]
SettingsDep = Annotated[Settings, Depends(get_settings)]


class DecisionOut(BaseModel):
    """A decision as the API shows it."""

    id: int
    job: str
    node: str
    alert_id: int | None
    state: str
    action: str
    step: int | None
    reason: str
    created_at: float
    updated_at: float

    @classmethod
    def of(cls, d: Decision) -> DecisionOut:
        return cls(id=d.id, job=d.job, node=d.node, alert_id=d.alert_id, state=d.state,
                   action=d.action, step=d.step, reason=d.reason, created_at=d.created_at,
                   updated_at=d.updated_at)


class HeldOut(BaseModel):
    """A firing alert the policy kept from becoming a decision."""

    alert_id: int
    node: str
    reason: str


class JobDecisions(BaseModel):
    """What a trainer polls: its job's open decisions and the alerts held back."""

    job: str
    decisions: list[DecisionOut]
    held: list[HeldOut]


class Report(BaseModel):
    """The trainer's (or an admin's) report on a decision."""

    step: int | None = Field(default=None, ge=0,
                             description="Step at which all ranks act or acted.")
    note: str = Field(default="", max_length=2000, description="What happened, for the record.")


def policy_of(settings: Settings, *, min_nodes: int | None = None) -> DrainPolicy:
    """The configured policy; a job may ask for a higher node minimum than the default."""
    return DrainPolicy(
        risk_threshold=settings.drain_risk_threshold,
        min_lead_s=settings.drain_min_lead_s,
        max_drains_per_hour=settings.drain_max_per_hour,
        min_nodes=max(settings.drain_min_nodes, min_nodes or 1),
        active_window_s=settings.drain_active_window_s,
        drain_again_after_s=settings.drain_again_after_s,
    )


@router.get("/jobs/{job}/decisions", dependencies=[Depends(require_ingest_token)])
def job_decisions(
    job: str,
    store: StoreDep,
    settings: SettingsDep,
    min_nodes: Annotated[int | None, Query(ge=1, description="The job's minimum node count "
                                           "(torchrun --nnodes MIN)")] = None,
) -> JobDecisions:
    """The trainer's poll: derive decisions from firing alerts, return the open ones."""
    with store.session() as session:
        held = derive(session, job=job, policy=policy_of(settings, min_nodes=min_nodes))
        decisions = [DecisionOut.of(d) for d in open_decisions(session, job=job)]
    return JobDecisions(job=job, decisions=decisions,
                        held=[HeldOut(alert_id=h.alert_id, node=h.node, reason=h.reason)
                              for h in held])


def _get(session: Session, job: str, decision_id: int) -> Decision:
    decision = session.get(Decision, decision_id)
    if decision is None or decision.job != job:
        raise HTTPException(status.HTTP_404_NOT_FOUND,
                            detail=f"job {job!r} has no decision {decision_id}")
    return decision


def _move(store: Store, job: str, decision_id: int, to: DecisionState,
          report: Report) -> tuple[DecisionOut, bool]:
    with store.session() as session:
        decision = _get(session, job, decision_id)
        try:
            changed = transition(decision, to, step=report.step, note=report.note)
        except DecisionStateError as exc:
            raise HTTPException(status.HTTP_409_CONFLICT, detail=str(exc)) from exc
        session.flush()
        return DecisionOut.of(decision), changed


@router.post("/jobs/{job}/decisions/{decision_id}/ack",
             dependencies=[Depends(require_ingest_token)])
def ack(job: str, decision_id: int, store: StoreDep, report: Report | None = None) -> DecisionOut:
    """The trainer saw the decision; ``step`` is when all ranks will act."""
    return _move(store, job, decision_id, "acknowledged", report or Report())[0]


@router.post("/jobs/{job}/decisions/{decision_id}/done",
             dependencies=[Depends(require_ingest_token)])
def done(job: str, decision_id: int, store: StoreDep, settings: SettingsDep,
         background: BackgroundTasks, report: Report | None = None) -> DecisionOut:
    """Checkpointed, drained and resumed; runs the configured drain command once."""
    out, changed = _move(store, job, decision_id, "done", report or Report())
    if changed and settings.drain_command:
        background.add_task(_run_drain_command, store, out, settings.drain_command,
                            settings.drain_command_timeout_s)
    return out


@router.post("/jobs/{job}/decisions/{decision_id}/failed",
             dependencies=[Depends(require_ingest_token)])
def failed(job: str, decision_id: int, store: StoreDep,
           report: Report | None = None) -> DecisionOut:
    """The drain did not complete (the node failed first, or the checkpoint failed)."""
    return _move(store, job, decision_id, "failed", report or Report())[0]


@router.post("/jobs/{job}/decisions/{decision_id}/cancel", dependencies=[Depends(require_admin)])
def cancel(job: str, decision_id: int, store: StoreDep,
           report: Report | None = None) -> DecisionOut:
    """An admin calls the drain off; a trainer that has not acted yet will not."""
    return _move(store, job, decision_id, "cancelled", report or Report())[0]


@router.post("/jobs/{job}/decisions/{decision_id}/repaired",
             dependencies=[Depends(require_admin)])
def repaired(job: str, decision_id: int, store: StoreDep,
             report: Report | None = None) -> DecisionOut:
    """An admin fixed the drained node: back in the job, its next alert drains it without
    waiting out ``FORESHOCK_DRAIN_AGAIN_AFTER_S``. The drain still counts in the hourly cap."""
    return _move(store, job, decision_id, "repaired", report or Report())[0]


@router.get("/decisions")
def list_decisions(
    store: StoreDep,
    job: Annotated[str | None, Query(description="Only this job's decisions.")] = None,
    state: Annotated[str | None, Query(description=f"Only in this state: {', '.join(STATES)}.")]
    = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="Newest first, at most this many.")]
    = 100,
) -> list[DecisionOut]:
    """Every decision, newest first."""
    if state is not None and state not in STATES:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT,
                            detail=f"state={state!r} must be one of {', '.join(STATES)}")
    query = select(Decision).order_by(Decision.id.desc()).limit(limit)
    if job is not None:
        query = query.where(Decision.job == job)
    if state is not None:
        query = query.where(Decision.state == state)
    with store.session() as session:
        return [DecisionOut.of(d) for d in session.scalars(query)]


def _run_drain_command(store: Store, decision: DecisionOut, command: str,
                       timeout_s: float) -> None:
    """Run the scheduler's drain command and note its outcome on the decision."""
    argv = drain_argv(command, node=decision.node, job=decision.job)
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=timeout_s, check=False)
        output = (proc.stdout + proc.stderr).decode(errors="replace")[-300:].strip()
        outcome = f"exited {proc.returncode}" + (f": {output}" if output else "")
    except subprocess.TimeoutExpired:
        outcome = f"killed after {timeout_s:g} s"
    except OSError as exc:
        outcome = f"could not start: {exc}"
    # The drain itself is done; a failing scheduler command is recorded, not raised.
    log.info("drain command for decision %d (node %s) %s", decision.id, decision.node, outcome)
    with store.session() as session:
        row = session.get(Decision, decision.id)
        if row is not None:
            row.reason += f"\ndrain command `{shlex.join(argv)}` {outcome}"
