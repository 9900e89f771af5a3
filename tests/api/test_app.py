import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource

from collector.fleet_trace import read_trace
from collector.store import Store
from tests.collector.otlp_builder import RequestBuilder
from tests.conftest import LiveServer


def test_serve_answers_health_and_openapi(live_server, sqlite_url: str) -> None:
    server: LiveServer = live_server(sqlite_url)
    assert httpx.get(f"{server.url}/healthz").json() == {"status": "ok"}
    spec = httpx.get(f"{server.url}/openapi.json").json()
    assert spec["info"]["title"] == "Foreshock"
    for path in ("/v1/metrics", "/api/v1/series", "/api/v1/query_range", "/api/v1/latest"):
        assert path in spec["paths"]
    assert Path(sqlite_url.split("///", 1)[1]).exists()


def test_otel_sdk_exporter_to_live_service_then_query_api_and_export(
        live_server, store_url: str, tmp_path: Path) -> None:
    server: LiveServer = live_server(store_url)
    exporter = OTLPMetricExporter(endpoint=f"{server.url}/v1/metrics", timeout=10,
                                  preferred_temporality={Histogram: AggregationTemporality.DELTA})
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
    provider = MeterProvider(metric_readers=[reader], resource=Resource.create(
        {"job": "llm", "node": "node-07", "rank": 3}))
    meter = provider.get_meter("test")

    def temperatures(_options: CallbackOptions) -> list[Observation]:
        return [Observation(71.0 + g, {"gpu": g, "gpu.uuid": f"GPU-{g}"}) for g in range(2)]

    meter.create_observable_gauge("gpu.temperature", [temperatures], unit="Cel")
    step = meter.create_histogram("train.collective.duration", unit="s")
    for d in (0.1, 0.3):
        step.record(d, {"op": "all_reduce"})
    provider.shutdown()  # one final collection and export, like a finishing training job

    api = f"{server.url}/api/v1"
    latest = httpx.get(f"{api}/latest", params={"metric": "gpu.temperature", "job": "llm"}).json()
    assert [(v["labels"]["gpu"], v["value"]) for v in latest] == [(0, 71.0), (1, 72.0)]
    assert latest[0]["labels"]["node"] == "node-07"
    r = httpx.get(f"{api}/query_range", params={"metric": "train.collective.duration",
                                                "stat": "sum", "node": "node-07"}).json()
    [series] = r["series"]
    assert series["labels"]["rank"] == 3 and series["labels"]["op"] == "all_reduce"
    assert series["points"][0][1] == 0.4
    listed = httpx.get(f"{api}/series", params={"job": "llm"}).json()
    assert {"gpu.temperature", "train.collective.duration"} <= {s["metric"] for s in listed}

    out = tmp_path / "exported"
    done = subprocess.run([sys.executable, "-m", "api", "export", str(out), "--db", store_url,
                           "--job", "llm"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    trace = read_trace(out)
    assert trace.gpu["gpu.temperature"].tolist() == [71.0, 72.0]
    assert trace.node["train.collective.duration"].tolist() == [0.2]
    assert trace.meta.nodes == ("node-07",)


def test_every_acknowledged_point_survives_kill_9(live_server, store_url: str) -> None:
    server: LiveServer = live_server(store_url)
    acked: list[float] = []
    stop = threading.Event()
    t0 = float(int(time.time()) - 86400)

    def send(worker: int) -> None:
        i = 0
        with httpx.Client(timeout=5) as http:
            while not stop.is_set():
                ts = t0 + worker * 10_000 + i
                b = RequestBuilder(job="crash", node=f"w{worker}").gauge(
                    "gpu.temperature", [(ts, 50.0, {"gpu": g}) for g in range(64)])
                try:
                    r = http.post(f"{server.url}/v1/metrics", content=b.bytes(),
                                  headers={"content-type": "application/x-protobuf"})
                except httpx.HTTPError:
                    return  # the service died mid-request: this one was never acknowledged
                if r.status_code == 200 and not r.content:  # no partial_success: all stored
                    acked.append(ts)
                i += 1

    senders = [threading.Thread(target=send, args=(w,)) for w in range(2)]
    for s in senders:
        s.start()
    while len(acked) < 40:
        time.sleep(0.05)
    server.stop(kill=True)
    stop.set()
    for s in senders:
        s.join(10)
    restarted: LiveServer = live_server(store_url)
    restarted.stop()
    store = Store.open(store_url)
    gpu = store.read_trace(job="crash").gpu
    store.close()
    stored = gpu.groupby("ts")["gpu"].count()
    missing = [ts for ts in acked if stored.get(ts, 0) != 64]
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged requests lost"


def test_serve_refuses_bad_settings_by_their_names_and_never_starts(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # An infinite interval passed every bound and the service ran, never scoring (sleep(inf));
    # any bad setting printed a page of traceback. Now each is named as the user set it, a
    # token's value is not echoed, and nothing is served.
    import uvicorn
    from typer.testing import CliRunner

    from api import cli

    def started(*args: object, **kwargs: object) -> None:
        raise AssertionError("the server started on bad settings")

    monkeypatch.setattr(uvicorn, "run", started)
    env = {"FORESHOCK_SCORE_INTERVAL_S": "inf", "FORESHOCK_MAINTENANCE_INTERVAL_S": "nan"}
    (tmp_path / ".env").write_text("FORESHOCK_ADMIN_TOKN=s3cret\n")  # a typo'd name
    done = CliRunner().invoke(cli.app, ["serve", "--db", "mysql://db", "--port", "99999",
                                        "--env-file", str(tmp_path / ".env")], env=env)
    assert done.exit_code == 2, done.output
    said = done.output
    assert "FORESHOCK_SCORE_INTERVAL_S='inf': Input should be a finite number" in said
    assert "FORESHOCK_MAINTENANCE_INTERVAL_S='nan'" in said
    assert "FORESHOCK_PORT=99999: Input should be less than or equal to 65535" in said
    assert "FORESHOCK_DB_URL='mysql://db'" in said and "sqlite:///path.db" in said
    assert "FORESHOCK_ADMIN_TOKN: Extra inputs are not permitted" in said
    assert "Traceback" not in said and "s3cret" not in said


def test_serve_refuses_a_model_file_it_cannot_read_and_scores_with_the_one_it_loaded(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # A bad FORESHOCK_MODEL_PATH used to start the service with scoring off, said only in a
    # logged traceback; the model is now loaded before serving, and that very model scores.
    import uvicorn
    from typer.testing import CliRunner

    from api import cli

    served: list[object] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: served.append(app))
    (tmp_path / "bad.skops").write_text("not a model")
    db = f"sqlite:///{tmp_path / 'f.db'}"
    done = CliRunner().invoke(cli.app, ["serve", "--db", db],
                              env={"FORESHOCK_MODEL_PATH": str(tmp_path / "bad.skops")})
    assert done.exit_code == 2 and not served, done.output
    said = " ".join(done.output.split())
    assert "FORESHOCK_MODEL_PATH" in said and "not a readable skops model" in said
    done = CliRunner().invoke(cli.app, ["serve", "--db", db], env={"FORESHOCK_MODEL_PATH": "rules"})
    assert done.exit_code == 0, done.output
    [app] = served
    assert app.state.model.version.startswith("rules")  # type: ignore[attr-defined]
