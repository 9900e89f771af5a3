"""SimulatedGpuReader: realistic healthy values, seeded, and injected degradations that develop
and end in their failure at the set time."""

from __future__ import annotations

import pytest

from collector.metrics import GPU_METRICS
from trainer.gpu import GpuReader
from trainer.simulated_gpu import SimulatedGpuReader


class Clock:
    def __init__(self, t: float = 1_800_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _run(reader: SimulatedGpuReader, clock: Clock,
         seconds: int) -> list[dict[int, dict[str, float]]]:
    out = []
    for _ in range(seconds):
        clock.t += 1.0
        out.append({s.index: dict(s.values) for s in reader.sample()})
    return out


def test_healthy_values_look_like_a_loaded_h100() -> None:
    clock = Clock()
    reader = SimulatedGpuReader(gpus=8, seed=3, clock=clock)
    assert isinstance(reader, GpuReader) and reader.source == "simulated"
    history = _run(reader, clock, 120)
    last = history[-1]
    assert len(last) == 8
    assert set(last[0]) == {m.name for m in GPU_METRICS}
    for values in (v for h in history for v in h.values()):
        assert 55 <= values["gpu.temperature"] <= 80
        assert 300 <= values["gpu.power"] <= 700
        assert 1900 <= values["gpu.clock.sm"] <= 1980
        assert values["gpu.throttle.thermal"] == values["gpu.throttle.power"] == 0
        assert values["gpu.ecc.dbe"] == 0 and values["gpu.rows.remap.pending"] == 0
    assert reader.xids() == []
    assert reader.failure_at is None and not reader.failed


def test_same_seed_same_gpus_and_values() -> None:
    a, b = Clock(), Clock()
    ra = SimulatedGpuReader(gpus=2, seed=7, clock=a)
    rb = SimulatedGpuReader(gpus=2, seed=7, clock=b)
    assert [d.uuid for d in ra.devices()] == [d.uuid for d in rb.devices()]
    assert _run(ra, a, 5) == _run(rb, b, 5)
    assert [d.uuid for d in SimulatedGpuReader(gpus=2, seed=8).devices()] != \
        [d.uuid for d in ra.devices()]


@pytest.mark.parametrize(("kind", "signal", "xid", "lost"), [
    ("ecc", "gpu.ecc.sbe", 48, False),
    ("thermal", "gpu.temperature", 79, True),
    ("nvlink", "gpu.nvlink.crc_errors", 74, False),
    ("pcie", "gpu.pcie.replay", 79, True),
    ("power", "gpu.throttle.power", 79, True),
])
def test_degradation_develops_then_fails_at_the_set_time(
        kind: str, signal: str, xid: int, lost: bool) -> None:
    clock = Clock()
    reader = SimulatedGpuReader(gpus=4, seed=1, clock=clock)
    d = reader.inject(kind, gpu=2, develop_s=90)  # type: ignore[arg-type]
    assert reader.failure_at == d.failure_at == clock.t + 90
    before = _run(reader, clock, 80)
    assert not reader.failed
    healthy, sick = before[5], before[-1]
    if signal == "gpu.throttle.power":
        assert sum(h[2][signal] for h in before[-20:]) >= 5  # throttling comes and goes
        assert sum(h[1][signal] for h in before) == 0
    else:
        assert sick[2][signal] > healthy[2][signal] + 5
        assert sick[1][signal] <= healthy[1][signal] + 5  # the neighbours stay healthy
    if kind == "thermal":
        assert sick[2]["gpu.throttle.thermal"] == 1 and sick[2]["gpu.clock.sm"] < 1900
    assert all(x.code != xid or kind == "ecc" for x in reader.xids())
    after = _run(reader, clock, 15)
    assert reader.failed
    codes = [x.code for x in reader.xids() if x.index == 2]
    assert codes[-1] == xid
    assert (2 not in after[-1]) == lost
    if kind == "ecc":
        assert after[-1][2]["gpu.ecc.dbe"] == 1
        assert after[-1][2]["gpu.rows.remap.pending"] == 1
        assert after[-1][2]["gpu.rows.remapped.correctable"] >= 1


def test_ecc_precursor_xids_come_before_the_failure() -> None:
    clock = Clock()
    reader = SimulatedGpuReader(gpus=1, seed=0, clock=clock)
    reader.inject("ecc", gpu=0, develop_s=60)
    seen, sbe = [], {}
    for _ in range(70):
        clock.t += 1
        sbe[clock.t] = reader.sample()[0].values["gpu.ecc.sbe"]
        seen += [(x.code, x.ts) for x in reader.xids()]
    assert sorted(c for c, _ in seen[:-1]) == [63, 92] and seen[-1][0] == 48
    assert seen[-1][1] >= reader.failure_at  # type: ignore[operator]
    # XID 92 as the driver logs it: once the counter has gained 10 within a minute, not before.
    t92 = next(ts for c, ts in seen if c == 92)
    assert sbe[t92] - sbe[max(t92 - 60, min(sbe))] >= 10
    assert sbe[t92 - 1] - sbe[max(t92 - 61, min(sbe))] < 10


def test_bad_injections_name_what_was_wrong() -> None:
    reader = SimulatedGpuReader(gpus=2)
    with pytest.raises(ValueError, match="gpu=5"):
        reader.inject("ecc", gpu=5)
    with pytest.raises(ValueError, match="kind='melt'"):
        reader.inject("melt", gpu=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="failure_at"):
        reader.inject("ecc", gpu=0, start_at=100.0, failure_at=50.0)
    with pytest.raises(ValueError, match="gpus=0"):
        SimulatedGpuReader(gpus=0)
