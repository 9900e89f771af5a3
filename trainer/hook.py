"""`TelemetryHook`: one object and one context manager per step that measure a training loop
(step, compute and collective time, link probes, kernel profiles, GPU health) and export it
over OTLP/HTTP to ``foreshock serve``.

Usage (after ``torch.distributed.init_process_group`` when distributed)::

    hook = TelemetryHook(TelemetryHook.Config(endpoint="http://127.0.0.1:4318", job="llm-7b"))
    hook.instrument_ddp(ddp_model)          # optional, before the first backward
    for batch in loader:
        with hook.step():
            ...forward, backward, optimizer step...
    hook.close()
"""

from __future__ import annotations

import logging
import math
import os
import socket
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Literal

import torch
import torch.distributed as dist
from opentelemetry.metrics import CallbackOptions, Observation

from trainer.collectives import CollectiveRecord, CollectiveTimer
from trainer.export import Export, ExportTarget
from trainer.gpu import GpuReader, NvmlGpuReader
from trainer.gpu_sampler import GpuSampler
from trainer.probes import LinkProber, LinkResult, ProbePlan
from trainer.profiler import StepProfiler
from trainer.simulated_gpu import SimulatedGpuReader, node_seed
from trainer.step_window import StepWindow

log = logging.getLogger(__name__)

_DURATION_BUCKETS_S = (1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0, 3.0, 10.0)


@dataclass(frozen=True, kw_only=True, slots=True)
class HookStats:
    """What the hook did and what it lost."""

    steps: int
    exported_points: int
    dropped_points: int
    """Metric points that could not be delivered (collector down, slow or refusing)."""
    rejected_points: int
    """Metric points delivered and refused one by one (OTLP partial success: a timestamp far
    off, a value outside its metric's bounds); the first refusal's reason is logged."""
    failed_exports: int
    collectives_timed: int
    probe_rounds: int
    probe_cost_s: float
    profiled_steps: int
    errors: int
    """Internal errors swallowed so that training carried on (logged once)."""


class TelemetryHook:
    """Measures a training loop from inside; monitoring failures never reach the loop."""

    @dataclass(frozen=True, kw_only=True)
    class Config:
        """How the hook measures and where it sends."""

        endpoint: str | None = None
        """OTLP/HTTP base URL of ``foreshock serve``; None: ``OTEL_EXPORTER_OTLP_*`` or
        http://localhost:4318."""
        job: str = "default"
        """Job name (resource attribute ``job``)."""
        node: str | None = None
        """Node name; None: env ``FORESHOCK_NODE``, else the host name."""
        rank: int | None = None
        """Global rank; None: torch.distributed's rank, else env ``RANK``, else 0."""
        headers: Mapping[str, str] | None = None
        """Extra HTTP headers (e.g. ``Authorization``); None: ``OTEL_EXPORTER_OTLP_HEADERS``."""
        export_interval_s: float | None = None
        """Seconds between exports; None: ``OTEL_METRIC_EXPORT_INTERVAL`` or 5 s."""
        export_timeout_s: float | None = None
        """Bound on one export (and on `close`); None: ``OTEL_EXPORTER_OTLP_TIMEOUT`` or 5 s."""
        gpu: Literal["auto", "nvml", "simulated", "off"] = "auto"
        """GPU telemetry source; ``auto`` uses NVML where present and stands down elsewhere."""
        gpu_sample_interval_s: float = 1.0
        """Seconds between GPU samples."""
        sample_gpus: bool | None = None
        """Whether this rank samples the node's GPUs; None: only the node's lowest rank."""
        simulated_gpus: int = 8
        """GPUs per node for ``gpu='simulated'``."""
        seed: int = 0
        """Seed of the simulated GPUs (mixed with the node name)."""
        collectives: bool = True
        """Time torch.distributed collectives (reversibly patched while the hook is open)."""
        probe_interval_s: float = 60.0
        """Seconds between link probe rounds (0 disables); stretched to respect the budget."""
        probe_budget: float = 0.002
        """Largest fraction of training time that link probes may take."""
        probe_bytes: int = 4 * 1024 * 1024
        """Payload of one bandwidth probe."""
        profile_every_steps: int = 2000
        """Profile one step in this many (0 disables); ~0.1% overhead at the default."""
        profile_top_k: int = 10
        """Kernels kept from each profiled step."""
        enabled: bool = True
        """False: `step()` only counts steps; nothing is measured or sent."""

        def __post_init__(self) -> None:
            # Written so that NaN fails too: a NaN or infinite period would spin or never run.
            for name in ("export_interval_s", "export_timeout_s", "gpu_sample_interval_s"):
                v = getattr(self, name)
                if v is not None and not 0 < v < math.inf:
                    raise ValueError(f"hook.{name}={v} must be > 0 seconds and finite")
            if not 0 <= self.probe_interval_s < math.inf:
                raise ValueError(f"hook.probe_interval_s={self.probe_interval_s} must be >= 0 "
                                 "seconds and finite (0 disables probes)")
            if not 0 < self.probe_budget <= 1:
                raise ValueError(f"hook.probe_budget={self.probe_budget} must be within (0, 1]")
            if self.probe_bytes < 8:
                raise ValueError(f"hook.probe_bytes={self.probe_bytes} must be >= 8")
            if self.profile_every_steps < 0 or self.profile_top_k < 1:
                raise ValueError(f"hook.profile_every_steps={self.profile_every_steps} must be "
                                 f">= 0 and hook.profile_top_k={self.profile_top_k} >= 1")
            if self.gpu not in ("auto", "nvml", "simulated", "off"):
                raise ValueError(f"hook.gpu={self.gpu!r} must be auto, nvml, simulated or off")
            if not self.job:
                raise ValueError("hook.job must not be empty")

    def __init__(self, config: Config | None = None, *,
                 gpu_reader: GpuReader | None = None) -> None:
        self.config = config = config or TelemetryHook.Config()
        self.step_index = 0
        """Steps completed so far; the same on every rank that calls `step()` in lockstep."""
        self._callbacks: list[Callable[[int], None]] = []
        self._step_ctx = _Step(self)
        self._closed = False
        self._errors = 0
        self._window = StepWindow()
        self._t0 = 0.0
        self._probe_steps = (0.0, 0)
        self._links: dict[str, dict[str, float]] = {"bw": {}, "lat": {}}
        self._records: deque[CollectiveRecord] = deque(maxlen=8192)
        self._collectives_timed = 0
        distributed = dist.is_available() and dist.is_initialized()
        self.world_size = dist.get_world_size() if distributed else 1
        self.rank = config.rank if config.rank is not None else (
            dist.get_rank() if distributed else int(os.environ.get("RANK", "0")))
        self.node = config.node or os.environ.get("FORESHOCK_NODE") or socket.gethostname()
        self.timer: CollectiveTimer | None = None
        self.prober: LinkProber | None = None
        self.profiler: StepProfiler | None = None
        self.gpu: GpuSampler | None = None
        self.export: Export | None = None
        if not config.enabled:
            return
        nodes = [self.node]
        if distributed:
            nodes = [""] * self.world_size
            dist.all_gather_object(nodes, self.node)
        plan = ProbePlan.from_nodes(self.node, [str(n) for n in nodes])
        self.export = Export(
            ExportTarget(endpoint=config.endpoint, headers=config.headers,
                         interval_s=config.export_interval_s, timeout_s=config.export_timeout_s),
            resource={"job": config.job, "node": self.node, "rank": self.rank,
                      "service.name": "foreshock-trainer"})
        self._create_instruments()
        cuda = distributed and dist.get_backend() == "nccl"
        if config.collectives:
            self.timer = CollectiveTimer()
            try:
                self.timer.install()
            except RuntimeError as exc:  # another open hook times them already
                log.warning("foreshock: %s; this hook does not time collectives", exc)
                self.timer = None
            if distributed and self.timer is not None:
                device = torch.device("cuda", torch.cuda.current_device()) if cuda else \
                    torch.device("cpu")
                self.prober = LinkProber(plan, rank=self.rank, interval_s=config.probe_interval_s,
                                         budget=config.probe_budget, nbytes=config.probe_bytes,
                                         device=device, timer=self.timer)
        if config.profile_every_steps:
            self.profiler = StepProfiler(every_steps=config.profile_every_steps,
                                         top_k=config.profile_top_k,
                                         cuda=cuda or torch.cuda.is_available())
        is_leader = plan.leaders[plan.nodes.index(self.node)] == self.rank if distributed else True
        if config.sample_gpus if config.sample_gpus is not None else is_leader:
            reader = gpu_reader or self._default_reader()
            if reader is not None:
                self.gpu = GpuSampler(reader, self.export.meter,
                                      interval_s=config.gpu_sample_interval_s)

    def _default_reader(self) -> GpuReader | None:
        c = self.config
        if c.gpu == "simulated":
            return SimulatedGpuReader(gpus=c.simulated_gpus, seed=node_seed(c.seed, self.node))
        if c.gpu == "off":
            return None
        reader = NvmlGpuReader()
        if reader.devices():
            return reader
        if c.gpu == "nvml":
            log.warning("foreshock: gpu='nvml' but NVML found no GPU; GPU telemetry is off")
        reader.close()
        return None

    def _create_instruments(self) -> None:
        assert self.export is not None
        m = self.export.meter
        # Registered first so that each collection first moves the step's collective records
        # into the histogram (off the training thread), then reads the window.
        m.create_observable_gauge("train.step.duration", [self._observe_step], unit="s",
                                  description="wall time of one optimizer step (window mean)")
        m.create_observable_gauge("train.compute.duration", [self._observe_compute], unit="s",
                                  description="part of the step not spent waiting in collectives")
        self._coll_hist = m.create_histogram(
            "train.collective.duration", unit="s",
            description="time of one collective from issue to completion as this rank saw it",
            explicit_bucket_boundaries_advisory=list(_DURATION_BUCKETS_S))
        self._coll_bytes = m.create_counter("train.collective.bytes", unit="By",
                                            description="payload moved by collectives")
        m.create_observable_gauge("train.kernel.duration", [self._observe_kernels], unit="s",
                                  description="total time of a kernel in a profiled step")
        m.create_observable_gauge("net.link.bandwidth", [self._link_observer("bw")], unit="By/s",
                                  description="point-to-point probe throughput node -> peer")
        m.create_observable_gauge("net.link.latency", [self._link_observer("lat")], unit="s",
                                  description="point-to-point probe latency")

    # -- the training thread -------------------------------------------------------------------

    def step(self) -> _Step:
        """Context manager around one optimizer step."""
        return self._step_ctx

    def on_step_end(self, callback: Callable[[int], None]) -> None:
        """Call ``callback(step_index)`` on the training thread after each step, once the hook's
        own work is done; ``step_index`` counts completed steps and is the same on every rank,
        so rank-coordinated actions can key on it. Exceptions from callbacks propagate."""
        self._callbacks.append(callback)

    def instrument_ddp(self, model: torch.nn.Module, *, per_bucket: bool | None = None) -> None:
        """Time DDP's gradient all-reduce (call before the first backward): per bucket through
        a comm hook on CPU, from DDP's own sampled timers on GPU (see
        `CollectiveTimer.instrument_ddp`)."""
        if self.timer is not None:
            self.timer.instrument_ddp(model, per_bucket=per_bucket)

    def _begin(self) -> None:
        if self.profiler is not None and not self._closed:
            try:
                if self.profiler.should_profile(self.step_index):
                    self.profiler.start()
            except Exception:
                self._swallow("starting the profiler")
        self._t0 = time.perf_counter()

    def _end(self) -> None:
        duration = time.perf_counter() - self._t0
        if not self._closed and self.export is not None:
            try:
                self._measure(duration)
            except Exception:
                self._swallow("measuring a step")
            # Every rank must reach the probe whatever happened above, or the others would wait.
            if self.prober is not None:
                try:
                    self._maybe_probe(duration)
                except Exception:
                    self._swallow("probing links")
        self.step_index += 1
        if self.timer is not None:
            self.timer.step = self.step_index
        for callback in self._callbacks:
            callback(self.step_index)

    def _measure(self, duration: float) -> None:
        profiled = self.profiler is not None and self.profiler.active
        if profiled:
            assert self.profiler is not None
            self.profiler.stop()
        records = self.timer.collect() if self.timer is not None else []
        if records:
            self._records.extend(records)
            self._collectives_timed += len(records)
        if not profiled:  # A profiled step is slower; keep it out of the step-time means.
            self._window.add_step(duration, records)

    def _maybe_probe(self, duration: float) -> None:
        if self.prober is not None:
            total, count = self._probe_steps
            total, count = total + duration, count + 1
            rounds = self.prober.rounds
            results = self.prober.maybe_probe(self.step_index, total / count)
            # The mean step time sent to each round covers the steps since the last one.
            self._probe_steps = (0.0, 0) if self.prober.rounds != rounds else (total, count)
            if results:
                self._publish_links(results)

    def _publish_links(self, results: list[LinkResult]) -> None:
        for r in results:
            self._links["bw"][r.peer] = r.bandwidth_bps
            self._links["lat"][r.peer] = r.latency_s

    def _swallow(self, what: str) -> None:
        self._errors += 1
        if self._errors == 1:
            log.exception("foreshock: %s failed; the hook carries on and training is unaffected "
                          "(further errors are counted in hook.stats.errors)", what)

    # -- the exporter's thread ---------------------------------------------------------------

    def _observe_step(self, options: CallbackOptions) -> Iterable[Observation]:
        while self._records:
            rec = self._records.popleft()
            d = rec.duration_s or 0.0
            self._coll_hist.record(d, {"op": rec.op, "group": rec.group,
                                       "bytes": _bytes_bucket(rec.nbytes)})
            if rec.nbytes:
                self._coll_bytes.add(rec.nbytes, {"op": rec.op})
        self._closed_window = self._window.take()
        w = self._closed_window
        return [Observation(w.step_mean_s)] if w is not None else []

    def _observe_compute(self, options: CallbackOptions) -> Iterable[Observation]:
        w = getattr(self, "_closed_window", None)
        return [Observation(w.compute_mean_s)] if w is not None else []

    def _observe_kernels(self, options: CallbackOptions) -> Iterable[Observation]:
        if self.profiler is None:
            return []
        return [Observation(s, {"kernel": k}) for k, s in self.profiler.take()]

    def _link_observer(self, which: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            got, self._links[which] = self._links[which], {}
            return [Observation(v, {"peer": peer}) for peer, v in got.items()]

        return observe

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def stats(self) -> HookStats:
        e = self.export.exporter if self.export is not None else None
        return HookStats(
            steps=self.step_index,
            exported_points=e.exported_points if e else 0,
            dropped_points=e.dropped_points if e else 0,
            rejected_points=(self.export.refusals.points
                             if self.export is not None and self.export.refusals else 0),
            failed_exports=e.failed_exports if e else 0,
            collectives_timed=self._collectives_timed,
            probe_rounds=self.prober.rounds if self.prober else 0,
            probe_cost_s=self.prober.total_cost_s if self.prober else 0.0,
            profiled_steps=self.profiler.profiled_steps if self.profiler else 0,
            errors=self._errors + (self.timer.errors if self.timer else 0))

    def flush(self) -> bool:
        """Export what was measured now (bounded by the export timeout)."""
        if self.profiler is not None:
            self.profiler.join()
        return self.export.flush() if self.export is not None else True

    def close(self) -> None:
        """Stop sampling, send the last window (bounded by the export timeout), uninstall."""
        if self._closed:
            return
        self._closed = True
        if self.timer is not None:
            self.timer.uninstall()
        if self.profiler is not None:
            self.profiler.abort()
            self.profiler.join()
        if self.gpu is not None:
            self.gpu.close()
        if self.export is not None:
            self.export.close()

    def __enter__(self) -> TelemetryHook:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Step:
    """The reusable per-step context manager (cheaper than a generator per step)."""

    __slots__ = ("_hook",)

    def __init__(self, hook: TelemetryHook) -> None:
        self._hook = hook

    def __enter__(self) -> None:
        self._hook._begin()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        self._hook._end()
        return False


def _bytes_bucket(n: int) -> str:
    for bound, label in ((1 << 10, "1KiB"), (1 << 14, "16KiB"), (1 << 18, "256KiB"),
                         (1 << 22, "4MiB"), (1 << 26, "64MiB"), (1 << 30, "1GiB")):
        if n <= bound:
            return label
    return ">1GiB"

