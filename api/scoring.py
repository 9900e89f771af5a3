"""The service's scoring loop: every ``score_interval_s`` read each active job's recent data
from the store, score every GPU, node and link through the same feature/model code as
backtests, write ``risk_scores``, and open or resolve alerts with hysteresis.

Each job keeps a ``FeatureEngine`` in memory; after a first read of ``score_window_s`` of
history only the rows since the last read (with a small overlap for late rows, which the engine
de-duplicates) are fetched.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
from fastapi import FastAPI
from sqlalchemy import select

from api.settings import Settings
from collector.schema import Entity
from collector.store import Store
from predictor.features import FeatureEngine
from predictor.hysteresis import AlertPolicy, PolicyConfig, Transition
from predictor.risk_scores import prune, write_scores
from predictor.scorer import Scorer, load_model

log = logging.getLogger("foreshock.scoring")

SNAPSHOT_S = 300.0
"""Every entity's risk is written at least this often; risky ones at every tick."""
WRITE_ABOVE = 0.02
"""Risk at or above which an entity's score is written at every tick."""


@dataclass
class JobState:
    """What the loop remembers about one job between ticks."""

    engine: FeatureEngine = field(default_factory=FeatureEngine)
    policy: AlertPolicy = field(default_factory=AlertPolicy)
    read_until: float | None = None
    last_snapshot: float = -np.inf


def policy_from(settings: Settings) -> PolicyConfig:
    """The alert policy: the predictor's defaults, with the settings' overrides."""
    compressed = PolicyConfig().compressed(settings.alert_time_compression)
    return compressed.overridden(fire_at=settings.alert_fire_at,
                                 persist_s=settings.alert_persist_s)


def active_jobs(store: Store) -> list[str]:
    with store.session() as s:
        return sorted(s.scalars(select(Entity.job).distinct()).all())


def score_job(store: Store, scorer: Scorer, job: str, state: JobState, *, now: float,
              window_s: float, interval_s: float) -> list[Transition]:
    """One tick for one job; returns the alert transitions it caused."""
    start = now - window_s if state.read_until is None else state.read_until - 2 * interval_s
    trace = store.read_trace(job=job, start=start, end=now)
    if len(trace.gpu) + len(trace.node) + len(trace.links) + len(trace.events) == 0 and (
            state.read_until is None):
        return []
    state.read_until = now
    state.engine.update(trace, now)
    risks = scorer.score(state.engine.features(now))
    transitions = state.policy.step(risks, now)
    snapshot = now - state.last_snapshot >= SNAPSHOT_S
    if snapshot:
        state.last_snapshot = now
    to_write = risks if snapshot else risks[risks["risk"] >= WRITE_ABOVE]
    with store.session() as session:
        write_scores(session, job=job, ts=now, risks=to_write, model_version=scorer.version)
        _apply(session, job, transitions, scorer.version)
    return transitions


def _apply(session: object, job: str, transitions: list[Transition], version: str) -> None:
    try:
        from api import alert_state
    except ImportError:  # the alerts stage is optional until it ships
        return
    for tr in transitions:
        if tr.action == "resolve":
            alert_state.resolve(session, job=job, node=tr.node, gpu=tr.gpu,  # type: ignore[arg-type]
                                peer=tr.peer, kind=tr.kind, ts=tr.ts)
        else:
            alert_state.fire(session, alert_state.RiskObservation(  # type: ignore[arg-type]
                job=job, node=tr.node, gpu=tr.gpu, peer=tr.peer, kind=tr.kind,  # type: ignore[arg-type]
                risk=min(max(tr.risk, 0.0), 1.0), lead_s=tr.lead_s, signals=tr.signals,
                model_version=version, ts=tr.ts))


def score_all(store: Store, scorer: Scorer, jobs: dict[str, JobState], *, now: float,
              window_s: float, interval_s: float) -> int:
    """One tick over every job; returns the number of transitions. Errors stay per job."""
    count = 0
    for job in active_jobs(store):
        state = jobs[job] if isinstance(jobs, defaultdict) else jobs.setdefault(job, JobState())
        try:
            count += len(score_job(store, scorer, job, state, now=now, window_s=window_s,
                                   interval_s=interval_s))
        except Exception:  # one bad job must not stop scoring of the others
            log.exception("scoring job %s failed", job)
    return count


async def run(app: FastAPI) -> None:
    """Runs for the service's lifetime; logs and carries on after its own errors."""
    settings = app.state.settings
    try:
        model = app.state.model if app.state.model is not None else load_model(settings.model_path)
    except Exception:  # a bad model file must not take the rest of the service down
        log.exception("cannot load model %s; scoring is off", settings.model_path)
        return
    scorer = Scorer(model)
    policy = policy_from(settings)
    jobs: dict[str, JobState] = defaultdict(lambda: JobState(policy=AlertPolicy(config=policy)))
    window_s = float(settings.score_window_s)
    retention_s = float(settings.raw_retention_s)
    last_prune = 0.0
    log.info("scoring every %.0f s with model %s", settings.score_interval_s, scorer.version)
    while True:
        await asyncio.sleep(settings.score_interval_s)
        now = time.time()
        try:
            await asyncio.to_thread(score_all, app.state.store, scorer, jobs, now=now,
                                    window_s=window_s, interval_s=settings.score_interval_s)
            if now - last_prune > 3600:
                last_prune = now
                with app.state.store.session() as session:
                    prune(session, before=now - retention_s)
        except Exception:  # keep scoring after a store hiccup; the next tick retries
            log.exception("scoring tick failed")


__all__ = ["JobState", "policy_from", "run", "score_all", "score_job"]
