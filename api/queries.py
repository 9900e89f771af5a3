"""Query API under ``/api/v1``: series, range queries, latest values, events, jobs."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from api.deps import get_store
from collector import query as q
from collector.metrics import MAX_INT
from collector.store import Store

router = APIRouter(prefix="/api/v1", tags=["queries"])


class SeriesInfo(BaseModel):
    metric: str = Field(description="Canonical or OTel metric name.")
    stat: str = Field(description="'' for gauges/sums; sum, count, min or max of a histogram.")
    kind: str = Field(description="gauge, cumulative, delta, histogram, delta_histogram, summary.")
    unit: str = ""
    labels: dict[str, Any] = Field(description="job, node, rank, gpu, peer, gpu.uuid, others.")


class RangeSeries(BaseModel):
    labels: dict[str, Any]
    points: list[tuple[float, float]] = Field(description="[ts (Unix s), value] pairs, by time.")


class RangeResult(BaseModel):
    metric: str
    stat: str
    start: float
    end: float
    step: float | None
    agg: str
    series: list[RangeSeries]


class LatestValue(BaseModel):
    labels: dict[str, Any]
    ts: float
    value: float


class EventInfo(BaseModel):
    labels: dict[str, Any]
    ts: float
    kind: str
    code: int | None


def entity_filter(
    job: Annotated[str | None, Query(description="Only this job.")] = None,
    node: Annotated[str | None, Query(description="Only this node.")] = None,
    rank: Annotated[int | None, Query(ge=0, le=MAX_INT, description="Only this rank.")] = None,
    gpu: Annotated[int | None, Query(ge=0, le=MAX_INT, description="Only this GPU index.")
                   ] = None,
    peer: Annotated[str | None, Query(description="Only links to this peer node.")] = None,
) -> q.EntityFilter:
    return q.EntityFilter(job=job, node=node, rank=rank, gpu=gpu, peer=peer)


Filter = Annotated[q.EntityFilter, Depends(entity_filter)]
StoreDep = Annotated[Store, Depends(get_store)]
Stat = Annotated[str, Query(description="For histograms: sum, count, min or max.")]


@router.get("/series", response_model=list[SeriesInfo])
async def series(store: StoreDep, where: Filter,
                 metric: Annotated[str | None, Query(description="Only this metric.")] = None,
                 limit: Annotated[int, Query(ge=1, le=100_000)] = 1000) -> list[dict[str, Any]]:
    """List known series: each GPU's canonical metrics and every narrow series."""
    return await run_in_threadpool(q.list_series, store, where=where, name=metric, limit=limit)


@router.get("/query_range", response_model=RangeResult)
async def query_range(
    store: StoreDep, where: Filter,
    metric: Annotated[str, Query(description="Metric name, e.g. gpu.temperature.")],
    start: Annotated[float | None, Query(allow_inf_nan=False,
                                         description="Unix s; default end - 1 h.")] = None,
    end: Annotated[float | None, Query(allow_inf_nan=False,
                                       description="Unix s; default now.")] = None,
    step: Annotated[float | None, Query(gt=0, allow_inf_nan=False,
                                        description="Bucket width in s; none: raw.")] = None,
    agg: Annotated[str, Query(description="mean, min, max, last, sum or count per step.")] = "mean",
    stat: Stat = "",
) -> dict[str, Any]:
    """Points of one metric per series over a time range, optionally bucketed by ``step``.

    Raw points where still kept, 1-minute rollups (min/max/mean/last) before that.
    """
    end = time.time() if end is None else end
    start = end - 3600.0 if start is None else start
    try:
        result = await run_in_threadpool(q.query_range, store, metric=metric, where=where,
                                         start=start, end=end, step=step, agg=agg, stat=stat)
    except q.QueryError as exc:
        raise HTTPException(400, str(exc)) from exc
    except q.UnknownMetricError as exc:
        raise HTTPException(404, str(exc)) from exc
    return {"metric": metric, "stat": stat, "start": start, "end": end, "step": step,
            "agg": agg, "series": result}


@router.get("/latest", response_model=list[LatestValue])
async def latest(
    store: StoreDep, where: Filter,
    metric: Annotated[str, Query(description="Metric name, e.g. gpu.temperature.")],
    stat: Stat = "",
) -> list[dict[str, Any]]:
    """The newest raw value of a metric for each matching entity."""
    return await run_in_threadpool(q.latest, store, metric=metric, where=where, stat=stat)


@router.get("/events", response_model=list[EventInfo])
async def events(
    store: StoreDep, where: Filter,
    kind: Annotated[str | None, Query(description="Only this kind, e.g. xid.")] = None,
    start: Annotated[float, Query(allow_inf_nan=False, description="Unix s.")] = 0.0,
    end: Annotated[float | None, Query(allow_inf_nan=False,
                                       description="Unix s; default now.")] = None,
    limit: Annotated[int, Query(ge=1, le=100_000)] = 10_000,
) -> list[dict[str, Any]]:
    """Events (XIDs) in a time range, oldest first."""
    end = time.time() + 86400.0 if end is None else end
    return await run_in_threadpool(q.list_events, store, where=where, kind=kind, start=start,
                                   end=end, limit=limit)


@router.get("/jobs", response_model=list[str])
async def jobs(store: StoreDep) -> list[str]:
    """Jobs the store has data for."""
    return await run_in_threadpool(store.jobs)
