"""TelemetryHook in one process against a live ``foreshock serve``: what a training loop
produces arrives in the store; a collector that is down, slow or refusing never harms training."""

from __future__ import annotations

import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import torch
import torch.distributed as dist
from opentelemetry.metrics import NoOpMeter
from sqlalchemy import text

from collector.store import Store
from tests.conftest import LiveServer, free_port
from trainer.export import Export, ExportTarget
from trainer.gpu import GpuDevice, GpuSample, XidEvent
from trainer.gpu_sampler import GpuSampler
from trainer.hook import TelemetryHook
from trainer.simulated_gpu import SimulatedGpuReader

Config = TelemetryHook.Config


def _train(hook: TelemetryHook, steps: int, *, sleep_s: float = 0.005) -> None:
    model = torch.nn.Linear(32, 32)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        with hook.step():
            model(torch.randn(8, 32)).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
            time.sleep(sleep_s)


def test_a_training_loop_reaches_the_store(sqlite_url: str,
                                           live_server: Callable[..., LiveServer]) -> None:
    server = live_server(sqlite_url)
    sim = SimulatedGpuReader(gpus=2, seed=5)
    sim.inject("ecc", gpu=1, develop_s=1.0)
    hook = TelemetryHook(Config(endpoint=server.url, job="hook-test", node="n-a",
                                export_interval_s=0.5, gpu_sample_interval_s=0.2,
                                profile_every_steps=10), gpu_reader=sim)
    _train(hook, 30, sleep_s=0.01)
    time.sleep(max(0.0, sim.failure_at - time.time()) + 0.5)  # type: ignore[operator]
    assert hook.flush()
    hook.close()
    assert hook.stats.dropped_points == 0 and hook.stats.exported_points > 0
    assert hook.stats.rejected_points == 0
    assert hook.stats.steps == 30 and hook.stats.profiled_steps >= 1

    store = Store.open(sqlite_url)
    trace = store.read_trace(job="hook-test")
    gpu = trace.gpu
    assert set(gpu["node"]) == {"n-a"} and set(gpu["gpu"]) == {0, 1}
    assert gpu["gpu.temperature"].between(40, 95).all()
    assert gpu["gpu.power"].between(100, 800).all()
    assert gpu[gpu["gpu"] == 1]["gpu.ecc.sbe"].max() > 0
    xids = trace.events[trace.events["kind"] == "xid"]
    assert 48 in set(xids[xids["gpu"] == 1]["code"])
    assert trace.node["train.step.duration"].between(0.01, 1.0).all()
    assert (trace.node["train.compute.duration"] <= trace.node["train.step.duration"] + 1e-9).all()
    with store.engine.connect() as conn:
        uuids = {r.gpu: r.gpu_uuid for r in conn.execute(text(
            "SELECT gpu, gpu_uuid FROM entities WHERE job='hook-test' AND gpu IS NOT NULL"))}
        kernels = conn.execute(text(
            "SELECT s.attrs FROM series s JOIN entities e ON e.id = s.entity_id "
            "WHERE s.name = 'train.kernel.duration' AND e.rank = 0")).scalars().all()
    assert uuids == {d.index: d.uuid for d in sim.devices()}
    assert any("aten::addmm" in k for k in kernels)


def test_collector_down_training_finishes_and_drops_are_counted(
        caplog: pytest.LogCaptureFixture) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    original = dist.all_reduce
    with caplog.at_level(logging.WARNING, logger="trainer"):
        hook = TelemetryHook(Config(endpoint=endpoint, node="n-down", export_interval_s=0.1,
                                    export_timeout_s=0.3, gpu="simulated", simulated_gpus=2,
                                    gpu_sample_interval_s=0.1))
        assert dist.all_reduce is not original  # collectives are timed while the hook is open
        _train(hook, 60)
        hook.flush()
        hook.close()
    stats = hook.stats
    assert stats.steps == 60 and stats.errors == 0
    assert stats.failed_exports >= 1 and stats.dropped_points > 0
    assert stats.exported_points == 0
    warnings = [r for r in caplog.records if "could not send metrics" in r.message]
    assert len(warnings) == 1 and endpoint in warnings[0].getMessage()
    assert dist.all_reduce is original  # and put back when it closes


@pytest.fixture
def silent_collector() -> Iterator[str]:
    """Accepts connections and never answers: a collector that hangs."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        sock.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(sock.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    stop.set()
    thread.join()
    for c in held:
        c.close()
    sock.close()


def test_hanging_collector_costs_points_not_steps(silent_collector: str) -> None:
    hook = TelemetryHook(Config(endpoint=silent_collector, node="n-slow", export_interval_s=0.1,
                                export_timeout_s=0.5, gpu="off"))
    _train(hook, 150)  # ~1 s of training while exports hang
    hook.close()
    assert hook.stats.steps == 150 and hook.stats.errors == 0
    assert hook.stats.dropped_points > 0 and hook.stats.exported_points == 0


def test_refusing_collector_then_the_right_token(
        sqlite_url: str, live_server: Callable[..., LiveServer]) -> None:
    server = live_server(sqlite_url, env={"FORESHOCK_INGEST_TOKEN": "s3cret"})
    refused = TelemetryHook(Config(endpoint=server.url, job="tok", node="n-t", gpu="off",
                                   export_interval_s=60))
    _train(refused, 5)
    refused.flush()
    refused.close()
    assert refused.stats.dropped_points > 0 and refused.stats.exported_points == 0
    accepted = TelemetryHook(Config(endpoint=server.url, job="tok", node="n-t", gpu="off",
                                    export_interval_s=60,
                                    headers={"Authorization": "Bearer s3cret"}))
    _train(accepted, 5)
    accepted.flush()
    accepted.close()
    assert accepted.stats.dropped_points == 0 and accepted.stats.exported_points > 0
    assert len(Store.open(sqlite_url).read_trace(job="tok").node) >= 1


def test_points_the_collector_refuses_are_counted_and_the_reason_logged(
        sqlite_url: str, live_server: Callable[..., LiveServer],
        caplog: pytest.LogCaptureFixture) -> None:
    # A collector that keeps a millisecond refuses every point by the time it arrives, as one
    # refuses a hook whose clock is a year off. The OTLP exporter drops the response's
    # partial_success, so such points were counted as exported and lost without a word.
    server = live_server(sqlite_url, env={"FORESHOCK_ROLLUP_RETENTION_S": "0.001"})
    hook = TelemetryHook(Config(endpoint=server.url, job="late", node="n-l", gpu="off",
                                export_interval_s=60))
    with caplog.at_level(logging.WARNING, logger="trainer.export"):
        _train(hook, 5)
        assert hook.flush()
        hook.close()
    stats = hook.stats
    assert stats.steps == 5 and stats.errors == 0 and stats.dropped_points == 0
    assert stats.rejected_points == stats.exported_points > 0
    [warning] = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert re.search(rf"{server.url}/v1/metrics refused \d+ metric point\(s\): [\w.]+: timestamp ",
                     warning)
    assert "old; the store keeps" in warning and "check the sender's clock" in warning
    assert Store.open(sqlite_url).read_trace(job="late").node.empty


@pytest.mark.parametrize("variable", ["OTEL_PYTHON_EXPORTER_OTLP_HTTP_METRICS_CREDENTIAL_PROVIDER",
                                      "OTEL_PYTHON_EXPORTER_OTLP_HTTP_CREDENTIAL_PROVIDER"])
def test_a_credential_provider_named_in_the_environment_is_still_loaded(
        variable: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The session that reads refusals must not stand in for the one the exporter would load
    # from the environment (an auth token's): the exporter looks the provider up, and one that
    # is not installed is its error, not silently ignored.
    monkeypatch.setenv(variable, "foreshock-no-such-provider")
    with pytest.raises(RuntimeError, match="foreshock-no-such-provider"):
        Export(ExportTarget(endpoint="http://127.0.0.1:9", headers=None, interval_s=60,
                            timeout_s=1), resource={"job": "j"})
    monkeypatch.delenv(variable)
    export = Export(ExportTarget(endpoint="http://127.0.0.1:9", headers=None, interval_s=60,
                                 timeout_s=1), resource={"job": "j"})
    assert export.refusals is not None
    export.close()


def test_otel_environment_variables_are_honoured(
        sqlite_url: str, live_server: Callable[..., LiveServer],
        monkeypatch: pytest.MonkeyPatch) -> None:
    server = live_server(sqlite_url)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", server.url)
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "60000")
    monkeypatch.setenv("FORESHOCK_NODE", "node-from-env")
    hook = TelemetryHook(Config(job="env", gpu="off"))
    assert hook.node == "node-from-env"
    _train(hook, 5)
    hook.close()
    assert hook.stats.exported_points > 0
    assert set(Store.open(sqlite_url).read_trace(job="env").node["node"]) == {"node-from-env"}


class _BrokenReader:
    """A GPU reader whose every read fails (a driver in trouble)."""

    source = "nvml"

    def devices(self) -> list[GpuDevice]:
        return [GpuDevice(index=0, uuid="GPU-x")]

    def sample(self) -> list[GpuSample]:
        raise RuntimeError("NVML exploded")

    def xids(self) -> list[XidEvent]:
        raise RuntimeError("NVML exploded")

    def close(self) -> None:
        raise RuntimeError("NVML exploded")


def test_monitoring_failures_never_reach_the_loop() -> None:
    hook = TelemetryHook(Config(endpoint=f"http://127.0.0.1:{free_port()}", node="n-b",
                                gpu_sample_interval_s=0.05, export_timeout_s=0.2),
                         gpu_reader=_BrokenReader())
    _train(hook, 20)
    hook.close()
    hook.close()  # closing twice is harmless
    assert hook.stats.steps == 20


def test_step_callbacks_see_the_same_index_and_user_errors_propagate() -> None:
    hook = TelemetryHook(Config(enabled=False))
    seen: list[int] = []
    hook.on_step_end(seen.append)
    _train(hook, 3, sleep_s=0)
    with pytest.raises(ZeroDivisionError), hook.step():
        _ = 1 / 0
    assert seen == [1, 2, 3, 4] and hook.step_index == 4
    hook.close()


@pytest.mark.parametrize(("field", "value"), [
    ("export_interval_s", 0), ("gpu_sample_interval_s", -1), ("probe_budget", 0),
    ("probe_interval_s", -5), ("probe_bytes", 1), ("profile_every_steps", -1), ("gpu", "cuda"),
    ("job", ""), ("export_interval_s", float("nan")), ("export_timeout_s", float("inf")),
    ("gpu_sample_interval_s", float("nan")), ("probe_interval_s", float("nan")),
    ("probe_interval_s", float("inf")),
])
def test_bad_config_names_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"hook.{field}"):
        Config(**{field: value})  # type: ignore[arg-type]


@pytest.mark.parametrize("interval_s", [0.0, float("nan"), float("inf")])
def test_the_gpu_sampler_refuses_a_period_that_would_spin_or_never_sample(
        interval_s: float) -> None:
    # The hook's Config checks this first; the sampler, usable on its own, checks it the same way.
    with pytest.raises(ValueError, match=r"gpu_sample_interval_s=.* > 0 seconds and finite"):
        GpuSampler(SimulatedGpuReader(), NoOpMeter("t"), interval_s=interval_s)
