from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from collector.rollup import roll_up_and_expire
from collector.store import Store
from tests.collector.test_store import T0, small_trace


def _client(db_url: str) -> Iterator[TestClient]:
    store = Store.open(db_url)
    store.write_trace(small_trace(steps=12), job="j")
    settings = Settings(db_url=db_url, maintenance_interval_s=3600)
    with TestClient(create_app(settings, store=store)) as c:
        yield c
    store.close()


@pytest.fixture
def client(store_url: str) -> Iterator[TestClient]:
    yield from _client(store_url)


@pytest.fixture
def sqlite_client(sqlite_url: str) -> Iterator[TestClient]:
    """Parameter validation happens before the store: one database is enough."""
    yield from _client(sqlite_url)


def test_series_lists_gpu_columns_and_narrow_series(client: TestClient) -> None:
    listed = client.get("/api/v1/series", params={"job": "j", "node": "n0"}).json()
    metrics = {(s["metric"], s["labels"].get("gpu"), s["labels"].get("peer")) for s in listed}
    assert ("gpu.temperature", 1, None) in metrics
    assert ("net.link.bandwidth", None, "n1") in metrics
    assert ("train.step.duration", None, None) in metrics
    only = client.get("/api/v1/series", params={"metric": "gpu.power", "gpu": 0}).json()
    assert {(s["metric"], s["labels"]["node"]) for s in only} == {("gpu.power", "n0"),
                                                                  ("gpu.power", "n1")}


def test_query_range_raw_and_with_step_and_aggregation(client: TestClient) -> None:
    params = {"metric": "gpu.temperature", "node": "n0", "gpu": 1, "start": T0, "end": T0 + 110}
    [raw] = client.get("/api/v1/query_range", params=params).json()["series"]
    assert raw["labels"] == {"job": "j", "node": "n0", "gpu": 1}
    assert raw["points"][:2] == [[T0, 61.0], [T0 + 10, 62.0]] and len(raw["points"]) == 12
    r = client.get("/api/v1/query_range", params={**params, "step": 60, "agg": "max"}).json()
    # T0 is 20 s into a minute: the first bucket holds 4 samples, the next 6.
    assert r["series"][0]["points"] == [[T0 - 20, 64.0], [T0 + 40, 70.0], [T0 + 100, 72.0]]
    r = client.get("/api/v1/query_range", params={**params, "step": 60, "agg": "count"}).json()
    assert [v for _, v in r["series"][0]["points"]] == [4, 6, 2]
    both = client.get("/api/v1/query_range", params={"metric": "train.step.duration",
                                                     "start": T0, "end": T0}).json()
    assert sorted(s["labels"]["node"] for s in both["series"]) == ["n0", "n1"]


def test_latest_value_per_entity(client: TestClient) -> None:
    latest = client.get("/api/v1/latest", params={"metric": "gpu.temperature"}).json()
    assert [(v["labels"]["node"], v["labels"]["gpu"], v["value"]) for v in latest] == [
        ("n0", 0, 71.0), ("n0", 1, 72.0), ("n1", 0, 71.0), ("n1", 1, 72.0)]
    assert {v["ts"] for v in latest} == {T0 + 110}
    [link] = client.get("/api/v1/latest", params={"metric": "net.link.latency"}).json()
    assert link["labels"]["peer"] == "n1" and link["value"] == 1e-5


def test_events_and_jobs(client: TestClient) -> None:
    events = client.get("/api/v1/events", params={"kind": "xid", "node": "n0"}).json()
    assert [(e["labels"]["gpu"], e["code"]) for e in events] == [(1, 79)]
    assert client.get("/api/v1/jobs").json() == ["j"]


@pytest.mark.parametrize(("params", "status", "message"), [
    ({"metric": "no.such.metric"}, 404, "no series of metric 'no.such.metric'"),
    ({"metric": "gpu.power", "agg": "median", "start": 0, "end": 1}, 400, "agg='median'"),
    ({"metric": "gpu.power", "start": 10, "end": 5}, 400, "must not be before start"),
    ({"metric": "gpu.power", "start": 0, "end": 1e9, "step": 1}, 400, "step=1.0 must be"),
])
def test_bad_queries_name_the_parameter(sqlite_client: TestClient, params: dict[str, object],
                                        status: int, message: str) -> None:
    r = sqlite_client.get("/api/v1/query_range", params=params)
    assert r.status_code == status and message in r.json()["detail"]


def test_old_ranges_answer_from_rollups_after_retention(client: TestClient) -> None:
    store: Store = client.app.state.store  # type: ignore[attr-defined]
    roll_up_and_expire(store, now=T0 + 10_000, raw_retention_s=30, rollup_retention_s=1e9)
    params = {"metric": "gpu.temperature", "node": "n0", "gpu": 1, "start": T0 - 60,
              "end": T0 + 200}
    [series] = client.get("/api/v1/query_range", params={**params, "agg": "max",
                                                          "step": 60}).json()["series"]
    # The first minute is a rollup now (its max), the later ones are still raw.
    assert series["points"] == [[T0 - 20, 64.0], [T0 + 40, 70.0], [T0 + 100, 72.0]]
    [raw] = client.get("/api/v1/query_range", params=params).json()["series"]
    assert raw["points"][-2:] == [[T0 + 100, 71.0], [T0 + 110, 72.0]]
    assert raw["points"][0] == [T0 - 20, 61.0 + 1.5]  # a rollup minute reads as its mean


def test_times_that_are_no_time_and_indices_past_the_stores_are_refused_by_name(
        sqlite_client: TestClient) -> None:
    # Before: start=nan answered "end must not be before start=nan", events and risk history
    # answered [] as if nothing were there, step=inf gave raw points, and gpu=1e20 a bare 500.
    for path, params, name in [
        ("/api/v1/query_range", {"metric": "gpu.power", "start": "nan", "end": 5}, "start"),
        ("/api/v1/query_range", {"metric": "gpu.power", "start": "-inf", "end": "inf"}, "start"),
        ("/api/v1/query_range", {"metric": "gpu.power", "start": 0, "end": 60, "step": "inf"},
         "step"),
        ("/api/v1/events", {"start": "nan"}, "start"),
        ("/api/v1/events", {"end": "inf"}, "end"),
        ("/api/v1/risk/history", {"node": "n0", "start": "nan"}, "start"),
        ("/api/v1/latest", {"metric": "gpu.power", "gpu": 10**20}, "gpu"),
        ("/api/v1/series", {"rank": 2**31}, "rank"),
    ]:
        r = sqlite_client.get(path, params=params)
        assert r.status_code == 422, (path, params, r.text)
        assert name in {str(e["loc"][-1]) for e in r.json()["detail"]}, (path, params, r.text)
