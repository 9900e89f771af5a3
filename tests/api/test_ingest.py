import gzip
import json
import time
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from google.protobuf import json_format
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceResponse,
)

from api.app import create_app
from api.settings import Settings
from collector.store import Store
from tests.collector.otlp_builder import RequestBuilder, gpu_sample

PB = {"content-type": "application/x-protobuf"}
JS = {"content-type": "application/json"}


def _client(db_url: str) -> Iterator[TestClient]:
    settings = Settings(db_url=db_url, max_body_bytes=64 * 1024, maintenance_interval_s=3600)
    with TestClient(create_app(settings)) as c:
        yield c


@pytest.fixture
def client(store_url: str) -> Iterator[TestClient]:
    yield from _client(store_url)


@pytest.fixture
def sqlite_client(sqlite_url: str) -> Iterator[TestClient]:
    """Request validation happens before the store: one database is enough."""
    yield from _client(sqlite_url)


def _gpu_rows(c: TestClient) -> int:
    store: Store = c.app.state.store  # type: ignore[attr-defined]
    return len(store.read_trace().gpu)


def test_protobuf_json_and_gzip_bodies_are_stored(client: TestClient) -> None:
    now = time.time()
    r = client.post("/v1/metrics", content=gpu_sample(now, job="j", node="a").bytes(), headers=PB)
    assert r.status_code == 200 and r.headers["content-type"] == "application/x-protobuf"
    assert not ExportMetricsServiceResponse.FromString(r.content).HasField("partial_success")
    body = json_format.MessageToJson(gpu_sample(now, job="j", node="b").request)
    r = client.post("/v1/metrics", content=body, headers=JS)
    assert r.status_code == 200 and r.json() == {}
    gzipped = gzip.compress(gpu_sample(now, job="j", node="c").bytes())
    r = client.post("/v1/metrics", content=gzipped, headers={**PB, "content-encoding": "gzip"})
    assert r.status_code == 200
    gpu = client.app.state.store.read_trace(job="j").gpu  # type: ignore[attr-defined]
    assert sorted(set(gpu["node"])) == ["a", "b", "c"] and len(gpu) == 6


def test_bad_points_are_counted_in_partial_success_and_the_rest_stored(client: TestClient) -> None:
    now = time.time()
    b = RequestBuilder(job="j", node="a").gauge("gpu.temperature", [
        (now, 60.0, {"gpu": 0}), (now, float("nan"), {"gpu": 1}),
        (now + 7200, 61.0, {"gpu": 2}), (now, 62.0, {"gpu": "three"}),
        (now - 400 * 86400, 63.0, {"gpu": 4})])
    r = client.post("/v1/metrics", content=json_format.MessageToJson(b.request), headers=JS)
    assert r.status_code == 200
    partial = r.json()["partialSuccess"]
    assert partial["rejectedDataPoints"] == "4"
    for reason in ("not finite", "in the future", "attribute 'gpu' must be",
                   "is 400 days old; the store keeps 90 days"):
        assert reason in partial["errorMessage"]
    assert _gpu_rows(client) == 1


def test_points_the_store_cannot_hold_are_refused_one_by_one_and_the_rest_stored(
        client: TestClient) -> None:
    # On PostgreSQL each of these failed the whole request with a 500, losing the sound points
    # beside it (a GPU index or rank past its integer column, a node or series key past its
    # varchar); an XID of 79.5 was stored as 79 and one of -4 as -4.
    now = time.time()
    b = RequestBuilder(job="j", node="a").gauge("gpu.temperature", [
        (now, 60.0, {"gpu": 0}), (now, 61.0, {"gpu": 2**40}),
        (now, 62.0, {"gpu": 1, "node": "n" * 200})])
    b.gauge("gpu.xid", [(now, 79.0, {"gpu": 0}), (now + 1, 79.5, {"gpu": 0}),
                        (now + 2, -4.0, {"gpu": 0})])
    b.gauge("train.step.duration", [(now, 1.0, {"rank": 0}), (now, 1.0, {"rank": 2**40})])
    named = RequestBuilder(job="j", node="a").gauge(
        "app.loss", [(now, 2.0, {"phase": "train"}), (now, 2.0, {"phase": "x" * 2000})])
    named.gauge("m" * 300, [(now, 1.0, {})])
    for request, rejected, reasons in [
        (b, 5, ("attribute 'gpu' must be a non-negative integer up to 2147483647",
                "attribute 'node' is 200 characters long; the store keeps at most 128",
                "gpu.xid: value 79.5 is not an XID code", "value -4 is not an XID code",
                "attribute 'rank' must be")),
        (named, 2, ("name a series longer than the store keeps",
                    "a metric name over 256 characters"))]:
        r = client.post("/v1/metrics", content=request.request.SerializeToString(), headers=PB)
        assert r.status_code == 200, r.text
        partial = ExportMetricsServiceResponse.FromString(r.content).partial_success
        assert partial.rejected_data_points == rejected, partial.error_message
        for reason in reasons:
            assert reason in partial.error_message, partial.error_message
    trace = client.app.state.store.read_trace(job="j")  # type: ignore[attr-defined]
    assert trace.gpu[["node", "gpu", "gpu.temperature"]].values.tolist() == [["a", 0, 60.0]]
    assert trace.events["code"].tolist() == [79]
    assert len(trace.node) == 1
    loss = client.get("/api/v1/series", params={"metric": "app.loss"}).json()
    assert [s["labels"].get("phase") for s in loss] == ["train"]


@pytest.mark.parametrize(("body", "headers", "status", "message"), [
    (b"\x0a\xff\xff", PB, 400, "malformed OTLP protobuf"),
    (b"{oops", JS, 400, "malformed OTLP JSON"),
    (b"not gzip", {**PB, "content-encoding": "gzip"}, 400, "not gzip"),
    (b"x" * (65 * 1024), PB, 413, "exceeds max_body_bytes=65536"),
    (gzip.compress(b"\0" * (2 * 1024 * 1024)), {**PB, "content-encoding": "gzip"}, 413,
     "decompressed body exceeds max_body_bytes"),
    (b"a=1", {"content-type": "text/plain"}, 415, "Content-Type 'text/plain' is not supported"),
    (b"", {**PB, "content-encoding": "br"}, 415, "Content-Encoding 'br' is not supported"),
])
def test_bad_requests_get_a_status_naming_the_problem_and_change_nothing(
        sqlite_client: TestClient, body: bytes, headers: dict[str, str], status: int, message: str
) -> None:
    client = sqlite_client
    client.post("/v1/metrics", content=gpu_sample(time.time(), job="j", node="a").bytes(),
                headers=PB)
    r = client.post("/v1/metrics", content=body, headers=headers)
    assert r.status_code == status
    if r.headers["content-type"] == "application/x-protobuf":
        text = Status.FromString(r.content).message
    else:
        text = r.json()["message"]
    assert message in text
    assert _gpu_rows(client) == 2
    assert client.get("/healthz").status_code == 200


def test_ingest_token_is_required_when_configured(sqlite_url: str) -> None:
    settings = Settings(db_url=sqlite_url, ingest_token="s3cret")
    body = gpu_sample(time.time(), job="j", node="a").bytes()
    with TestClient(create_app(settings)) as c:
        r = c.post("/v1/metrics", content=body, headers=PB)
        assert r.status_code == 401 and "Bearer" in r.json()["detail"]
        r = c.post("/v1/metrics", content=body, headers={**PB, "authorization": "Bearer nope"})
        assert r.status_code == 401
        r = c.post("/v1/metrics", content=body, headers={**PB, "authorization": "Bearer s3cret"})
        assert r.status_code == 200 and _gpu_rows(c) == 2


def test_series_over_the_job_limit_are_refused_with_a_clear_message(sqlite_url: str) -> None:
    settings = Settings(db_url=sqlite_url, max_series_per_job=2)
    now = time.time()
    b = RequestBuilder(job="big", node="a").gauge(
        "app.latency", [(now, 1.0, {"route": f"/r{i}"}) for i in range(4)])
    with TestClient(create_app(settings)) as c:
        r = c.post("/v1/metrics", content=json.dumps(json_format.MessageToDict(b.request)),
                   headers=JS)
    partial = r.json()["partialSuccess"]
    assert partial["rejectedDataPoints"] == "2"
    assert "job 'big' reached max_series_per_job=2" in partial["errorMessage"]


def test_a_lost_database_answers_503_so_the_exporter_retries(pg_url: str) -> None:
    import psycopg

    from tests.conftest import PG_ADMIN_DSN

    body = gpu_sample(time.time(), job="j", node="a").bytes()
    with TestClient(create_app(Settings(db_url=pg_url, maintenance_interval_s=3600))) as c:
        assert c.post("/v1/metrics", content=body, headers=PB).status_code == 200
        name = pg_url.rsplit("/", 1)[1]
        with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        r = c.post("/v1/metrics", content=body, headers=PB)
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        assert "store unavailable, retry" in Status.FromString(r.content).message


def test_a_hook_sending_the_same_series_every_interval_gets_every_point_stored(
        client: TestClient) -> None:
    t0 = time.time() - 600
    for i in range(6):  # from the third request on, read through the learned request layout
        b = gpu_sample(t0 + i, job="j", node="a", temperature=60.0 + i)
        if i == 4:
            b.scope.metrics[0].gauge.data_points[1].as_double = float("nan")
        r = client.post("/v1/metrics", content=b.bytes(), headers=PB)
        assert r.status_code == 200
        partial = ExportMetricsServiceResponse.FromString(r.content).partial_success
        assert partial.rejected_data_points == (1 if i == 4 else 0)
        if i == 4:
            assert partial.error_message == "gpu.temperature: value nan is not finite"
    gpu = client.app.state.store.read_trace(job="j").gpu  # type: ignore[attr-defined]
    assert len(gpu) == 12
    assert gpu[gpu["gpu"] == 0]["gpu.temperature"].tolist() == [60.0 + i for i in range(6)]
    assert gpu[gpu["gpu"] == 1]["gpu.temperature"].isna().tolist() == [i == 4 for i in range(6)]
