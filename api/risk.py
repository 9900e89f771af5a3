"""Risk queries: the latest risk of every entity, and one entity's risk over time."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, HTTPException, Query, status

from api.deps import get_store
from collector.metrics import MAX_INT
from collector.store import Store
from predictor.risk_scores import history, latest

router = APIRouter(prefix="/api/v1/risk", tags=["risk"])

Kind = Literal["gpu", "link", "node"]


@router.get("")
def latest_risk(
    store: Annotated[Store, Depends(get_store)],
    job: Annotated[str | None, Query(description="Only this job.")] = None,
    node: Annotated[str | None, Query(description="Only this node.")] = None,
    kind: Annotated[Kind | None, Query(description="Only gpu, link or node entities.")] = None,
    min_risk: Annotated[float, Query(ge=0.0, le=1.0, description="Only risks at least this.")
                        ] = 0.0,
    limit: Annotated[int, Query(ge=1, le=100_000, description="At most this many rows.")] = 1000,
) -> dict[str, object]:
    """The newest score of every entity matching the filters, riskiest first."""
    with store.session() as s:
        rows = [r.to_json() for r in latest(s, job=job, node=node, kind=kind,
                                            min_risk=min_risk, limit=limit)]
    return {"risks": rows, "count": len(rows)}


@router.get("/history")
def risk_history(
    store: Annotated[Store, Depends(get_store)],
    job: Annotated[str | None, Query(description="Only this job.")] = None,
    node: Annotated[str | None, Query(description="Only this node.")] = None,
    gpu: Annotated[int | None, Query(ge=0, le=MAX_INT,
                                     description="Only this GPU index (needs node).")] = None,
    kind: Annotated[Kind | None, Query(description="Only gpu, link or node entities.")] = None,
    start: Annotated[float | None, Query(allow_inf_nan=False,
                                         description="From this Unix time (seconds).")] = None,
    end: Annotated[float | None, Query(allow_inf_nan=False,
                                       description="Until this Unix time (seconds).")] = None,
    limit: Annotated[int, Query(ge=1, le=100_000, description="At most this many rows.")
                     ] = 10_000,
) -> dict[str, object]:
    """Scores over time, oldest first."""
    if gpu is not None and node is None:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT,
                            detail="gpu is an index on a node: give node as well")
    if start is not None and end is not None and end < start:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT,
                            detail=f"end={end} is before start={start}")
    with store.session() as s:
        rows = [r.to_json() for r in history(s, job=job, node=node, gpu=gpu, kind=kind,
                                             start=start, end=end, limit=limit)]
    return {"risks": rows, "count": len(rows)}
