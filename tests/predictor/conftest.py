"""Small hand-built fleet traces for predictor tests: a few nodes, known degradations."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pytest
import typer

from collector.fleet_trace import FleetTrace, TraceMeta, empty_frame
from predictor.model import FitConfig, RiskModel
from predictor.training import fit_traces
from trainer.demo import DemoConfig
from trainer.simulated_gpu import SimulatedGpuReader, node_seed

T0 = 1_767_225_600.0


@dataclass(frozen=True, kw_only=True)
class Spec:
    """What to put in a tiny trace."""

    nodes: int = 4
    gpus: int = 4
    hours: float = 6.0
    interval_s: float = 30.0
    seed: int = 0
    ecc_ramp: tuple[str, int, float, float] | None = None
    """(node, gpu, ramp start h, failure h): SBE growth, XID 63/92 and failure XID 48."""
    hot_gpu: tuple[str, int, float] | None = None
    """(node, gpu, from h): temperature drift to throttling."""
    hot_nodes: tuple[tuple[str, ...], float, float] | None = None
    """(nodes, from h, degrees C): every GPU of each node warms by that much over the next
    hour and stays there (a failing fan on one node; on several at once, a rack's cooling)."""
    heavy_node: tuple[str, float, float] | None = None
    """(node, from h, watts): every GPU of the node draws that much more power over the next
    hour (a heavier job) and runs hotter by what the power gives (0.075 C per W): healthy."""
    benign_sbe: tuple[str, int] | None = None
    """A GPU with a steady benign SBE rate."""
    benign_sbe_per_h: float = 60.0
    reset_at_h: float | None = None
    """Every counter of node n001 restarts at zero here."""
    app_xids: int = 0
    slow_node: str | None = None
    nic_bad: tuple[str, float] | None = None
    """(node, from h): the node's link bandwidth falls to 40%."""
    power_capped: tuple[str, float] | None = None
    """(node, from h): every GPU of the node runs into its power cap from then on."""
    always_capped: str | None = None
    """A node whose GPUs run into their power cap all along (healthy, just hungry)."""
    nvlink_storm: tuple[str, int, float, float, float] | None = None
    """(node, gpu, from h, failure h, peak per h): NVLink CRC errors that grow from nothing to
    the peak rate, then XID 74 and the GPU fails (a short precursor, under an hour)."""
    nvlink_burst: tuple[str, int, float, float, float] | None = None
    """(node, gpu, from h, minutes, per h): NVLink CRC errors at a steady rate for a few
    minutes, then none (a burst that passes)."""
    drop_columns: tuple[str, ...] = ()
    with_node: bool = True
    with_links: bool = True
    extra_events: list[tuple[float, str, int, int]] = field(default_factory=list)


def make_trace(spec: Spec) -> FleetTrace:
    rng = np.random.default_rng(spec.seed)
    steps = int(spec.hours * 3600 / spec.interval_s)
    t = T0 + np.arange(steps) * spec.interval_s
    names = [f"n{i:03d}" for i in range(spec.nodes)]
    shape = (steps, spec.nodes, spec.gpus)
    hours = (t - T0) / 3600
    temp = 60 + rng.normal(0, 0.5, shape)
    sbe = rng.poisson(0.0005, shape).astype(float)
    throttle = np.zeros(shape)
    events: list[tuple[float, str, int, str, int]] = []
    failures: list[tuple[float, str, int, str, float]] = []
    if spec.ecc_ramp:
        node, gpu, h0, h1 = spec.ecc_ramp
        n = names.index(node)
        on = (hours >= h0) & (hours < h1)
        frac = np.clip((hours - h0) / max(h1 - h0, 1e-9), 0, 1)
        sbe[on, n, gpu] += rng.poisson(1 + 40 * frac[on] * spec.interval_s / 30)
        for s in np.flatnonzero(on)[:: max(1, int(600 / spec.interval_s))]:
            events.append((float(t[s]), node, gpu, "xid", int(rng.choice([63, 92]))))
        events.append((T0 + h1 * 3600, node, gpu, "xid", 48))
        failures.append((T0 + h1 * 3600, node, gpu, "gpu", (h1 - h0) * 3600))
    if spec.hot_gpu:
        node, gpu, h0 = spec.hot_gpu
        n = names.index(node)
        ramp = np.clip((hours - h0) * 3600 / 120, 0, 1)  # to +30 C within two minutes
        temp[:, n, gpu] += 30 * ramp
        throttle[:, n, gpu] = (temp[:, n, gpu] > 85).astype(float)
    if spec.hot_nodes:
        hot, h0, degrees = spec.hot_nodes
        for node in hot:
            temp[:, names.index(node), :] += degrees * np.clip(hours - h0, 0, 1)[:, None]
    extra_w = np.zeros(shape)
    if spec.heavy_node:
        node, h0, watts = spec.heavy_node
        extra_w[:, names.index(node), :] = watts * np.clip(hours - h0, 0, 1)[:, None]
        temp += 0.075 * extra_w
    if spec.benign_sbe:
        node, gpu = spec.benign_sbe
        sbe[:, names.index(node), gpu] += rng.poisson(
            spec.benign_sbe_per_h * spec.interval_s / 3600, steps)
    crc = np.zeros(shape)
    if spec.nvlink_storm:
        node, gpu, h0, h1, peak = spec.nvlink_storm
        on = (hours >= h0) & (hours < h1)
        frac = np.clip((hours - h0) / max(h1 - h0, 1e-9), 0, 1)
        crc[on, names.index(node), gpu] += rng.poisson(peak * frac[on] * spec.interval_s / 3600)
        events.append((T0 + h1 * 3600, node, gpu, "xid", 74))
        failures.append((T0 + h1 * 3600, node, gpu, "gpu", (h1 - h0) * 3600))
    if spec.nvlink_burst:
        node, gpu, h0, minutes, per_h = spec.nvlink_burst
        on = (hours >= h0) & (hours < h0 + minutes / 60)
        crc[on, names.index(node), gpu] += rng.poisson(per_h * spec.interval_s / 3600, on.sum())
    cum = np.cumsum(sbe, axis=0)
    if spec.reset_at_h is not None:
        s0 = int(spec.reset_at_h * 3600 / spec.interval_s)
        cum[s0:, 1] -= cum[s0, 1]
    mask = np.ones(shape, dtype=bool)
    gpu = pd.DataFrame({
        "ts": np.broadcast_to(t[:, None, None], shape)[mask],
        "node": np.broadcast_to(np.array(names)[None, :, None], shape)[mask],
        "gpu": np.broadcast_to(np.arange(spec.gpus)[None, None, :], shape)[mask],
        "gpu.temperature": temp[mask],
        "gpu.clock.sm": np.where(throttle > 0, 1400.0, 1980.0)[mask] + rng.normal(0, 5, mask.sum()),
        "gpu.power": rng.normal(600, 10, mask.sum()) + extra_w[mask],
        "gpu.throttle.thermal": throttle[mask],
        "gpu.ecc.sbe": cum[mask],
        "gpu.ecc.dbe": np.zeros(mask.sum()),
        "gpu.pcie.replay": np.zeros(mask.sum()),
        "gpu.nvlink.crc_errors": np.cumsum(crc, axis=0)[mask],
    })
    if spec.power_capped or spec.always_capped:
        capped = np.zeros(shape)
        if spec.power_capped:
            capped[hours >= spec.power_capped[1], names.index(spec.power_capped[0])] = 1.0
        if spec.always_capped:
            capped[:, names.index(spec.always_capped)] = 1.0
        gpu["gpu.throttle.power"] = capped[mask]
    gpu = gpu.drop(columns=list(spec.drop_columns))
    for _ in range(spec.app_xids):
        events.append((float(rng.choice(t)), names[int(rng.integers(spec.nodes))],
                       int(rng.integers(spec.gpus)), "xid", int(rng.choice([13, 31, 43, 45]))))
    for ts, node, g, code in spec.extra_events:
        events.append((ts, node, g, "xid", code))
    compute = np.ones((steps, spec.nodes)) + rng.normal(0, 0.005, (steps, spec.nodes))
    if spec.slow_node:
        compute[:, names.index(spec.slow_node)] *= 1.3
    coll = compute.max(axis=1, keepdims=True) - compute + 0.2
    nshape = (steps, spec.nodes)
    node_df = pd.DataFrame({
        "ts": np.broadcast_to(t[:, None], nshape).ravel() + 0.5,
        "node": np.broadcast_to(np.array(names)[None, :], nshape).ravel(),
        "train.step.duration": (compute + coll).ravel(), "train.compute.duration": compute.ravel(),
        "train.collective.duration": coll.ravel(),
    }) if spec.with_node else empty_frame("node.csv.gz")
    links = empty_frame("links.csv.gz")
    if spec.with_links:
        src = np.arange(spec.nodes)
        bw = np.full((steps, spec.nodes), 2.4e10) * np.exp(rng.normal(0, 0.03, (steps, spec.nodes)))
        if spec.nic_bad:
            node, h0 = spec.nic_bad
            n = names.index(node)
            bad = hours >= h0
            bw[bad, n] *= 0.4
            bw[bad, (n - 1) % spec.nodes] *= 0.4  # the link into the bad node too
        links = pd.DataFrame({
            "ts": np.broadcast_to(t[:, None], nshape).ravel() + 1.0,
            "src": np.array(names)[np.broadcast_to(src, nshape).ravel()],
            "dst": np.array(names)[np.broadcast_to((src + 1) % spec.nodes, nshape).ravel()],
            "net.link.bandwidth": bw.ravel(),
            "net.link.latency": np.full(bw.size, 1e-5)})
    ev = pd.DataFrame(events, columns=["ts", "node", "gpu", "kind", "code"]) if events else (
        empty_frame("events.csv").astype({"node": object, "kind": object}))
    fl = pd.DataFrame(failures, columns=["ts", "node", "gpu", "kind", "precursor_s"])
    meta = TraceMeta(start=T0, end=float(t[-1] + spec.interval_s), interval_s=spec.interval_s,
                     nodes=tuple(names), gpus_per_node=spec.gpus)
    return FleetTrace(meta=meta, gpu=gpu.sort_values("ts", kind="stable").reset_index(drop=True),
                      node=node_df.sort_values("ts", kind="stable").reset_index(drop=True),
                      links=links.sort_values("ts", kind="stable").reset_index(drop=True),
                      events=ev.sort_values("ts", kind="stable").reset_index(drop=True),
                      failures=fl)


def tiny_traces(seeds: Iterable[int] = range(4)) -> list[FleetTrace]:
    """Small hand-built fleets, each with a benign SBE GPU and one GPU's ECC ramp to failure."""
    return [make_trace(Spec(seed=s, nodes=4, gpus=4, hours=6, benign_sbe=("n000", 1),
                            ecc_ramp=(f"n00{1 + s % 3}", s % 4, 2.5 + 0.5 * (s % 2), 5.5)))
            for s in seeds]


@pytest.fixture(scope="session")
def tiny_model() -> RiskModel:
    """A small model fitted on hand-built traces (the shipped one is fitted offline)."""
    return fit_traces(tiny_traces(), config=FitConfig(max_iter=40, min_samples_leaf=5))


@pytest.fixture(scope="session")
def cli() -> typer.Typer:
    """The ``foreshock`` command line with every package's commands registered."""
    from api import cli as api_cli

    names = {c.name for c in api_cli.app.registered_commands}
    if "backtest" not in names:
        api_cli._register_all()
    return api_cli.app


def probe_trace(slow: set[str], from_h: float, nodes: int = 16,
                offsets: tuple[int, ...] = (1, 3), bw: float = 0.8,
                rotate: bool = False) -> FleetTrace:
    """A fleet whose nodes each probe the next one and the one three ahead (``offsets``); from
    ``from_h`` on, every probe from or to a node of ``slow`` takes 3x as long (and moves ``bw``
    of the bandwidth). With ``rotate``, the second peer moves on by one each minute (a ring and
    a rotating peer, as the generators probe)."""
    trace = make_trace(Spec(nodes=nodes, gpus=2, with_links=False))
    rng = np.random.default_rng(3)
    names = list(trace.meta.nodes)
    t = np.arange(trace.meta.start, trace.meta.end, 60.0)
    rows = []
    for k, ts in enumerate(t):
        for i, src in enumerate(names):
            for off in (offsets[0], 2 + k % (nodes - 3)) if rotate else offsets:
                dst = names[(i + off) % nodes]
                hit = ts >= trace.meta.start + from_h * 3600 and bool({src, dst} & slow)
                rows.append((ts + 1.0, src, dst, 2.4e10 * (bw if hit else 1.0)
                             * np.exp(rng.normal(0, 0.02)),
                             2e-6 * (3.0 if hit else 1.0) * np.exp(rng.normal(0, 0.05))))
    links = pd.DataFrame(rows, columns=["ts", "src", "dst", "net.link.bandwidth",
                                        "net.link.latency"])
    return FleetTrace(meta=trace.meta, gpu=trace.gpu, node=trace.node, links=links,
                      events=trace.events, failures=trace.failures)


def demo_trace(config: DemoConfig, *, seed: int) -> tuple[FleetTrace, float]:
    """What ``foreshock demo`` stores for ``config``, and when its failure strikes: each node's
    simulated GPUs (seeded as the demo's trainer seeds them, the victim's with the injected
    degradation) and step times, sampled every second as the hook exports them. ``seed`` draws
    the timing the real run never repeats: where within a second the nodes launch, and each
    export's few milliseconds of jitter."""
    rng = np.random.default_rng(seed)
    launch = T0 + rng.uniform(0.0, 1.0)
    failure_at = launch + config.fail_after_s
    gpu_rows: list[dict[str, object]] = []
    node_rows: list[tuple[float, str, float, float, float]] = []
    events: list[tuple[float, str, int, str, int]] = []
    for node in config.node_names:
        now = [launch]  # the reader's clock; seed 0: the example trainer's, which the demo keeps
        reader = SimulatedGpuReader(gpus=config.gpus_per_node, seed=node_seed(0, node),
                                    clock=lambda now=now: now[0])
        if node == config.victim:
            reader.inject(config.kind, gpu=config.gpu, start_at=failure_at - config.develop_s,
                          failure_at=failure_at)
        while now[0] < failure_at + config.tail_s:
            gpu_rows += [{"ts": s.ts, "node": node, "gpu": s.index, **s.values}
                         for s in reader.sample()]
            events += [(x.ts, node, x.index, "xid", x.code) for x in reader.xids()]
            step = config.step_period_s * (1.0 + abs(rng.normal(0.0, 0.001)))
            node_rows.append((now[0], node, step, 0.95 * step, 0.03 * step))
            now[0] += 1.0 + rng.uniform(-0.02, 0.02)
    meta = TraceMeta(start=launch, end=failure_at + config.tail_s, interval_s=1.0,
                     nodes=config.node_names, gpus_per_node=config.gpus_per_node)
    node = pd.DataFrame(node_rows, columns=["ts", "node", "train.step.duration",
                                            "train.compute.duration",
                                            "train.collective.duration"])
    trace = FleetTrace(
        meta=meta, gpu=pd.DataFrame(gpu_rows).sort_values("ts", kind="stable"),
        node=node.sort_values("ts", kind="stable"), links=empty_frame("links.csv.gz"),
        events=pd.DataFrame(events, columns=["ts", "node", "gpu", "kind", "code"]))
    return trace, failure_at
