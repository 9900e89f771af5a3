"""NvmlGpuReader against a fake pynvml (this machine has no GPU), and against a real GPU where
one exists (marker ``gpu``)."""

from __future__ import annotations

import logging

import pytest

from collector.metrics import GPU_METRICS
from tests.trainer.fake_nvml import FakeDevice, FakeNvml
from trainer.gpu import GpuReader, NvmlGpuReader

CANONICAL = {m.name for m in GPU_METRICS}


def _reader(*devices: FakeDevice) -> tuple[NvmlGpuReader, FakeNvml]:
    fake = FakeNvml(list(devices))
    return NvmlGpuReader(nvml=fake), fake


def test_reads_every_canonical_metric_in_metrics_md_units() -> None:
    reader, _ = _reader(FakeDevice(uuid="GPU-a", reasons=0x40 | 0x04),
                        FakeDevice(uuid="GPU-b", remapped=(2, 1, 1, 0)))
    assert isinstance(reader, GpuReader)
    assert [(d.index, d.uuid) for d in reader.devices()] == [(0, "GPU-a"), (1, "GPU-b")]
    a, b = reader.sample()
    assert set(a.values) == CANONICAL
    assert a.values["gpu.utilization"] == pytest.approx(0.87)
    assert a.values["gpu.power"] == pytest.approx(612.0)  # mW -> W
    assert a.values["gpu.memory.used"] == 70 * 1024**3
    assert a.values["gpu.memory.temperature"] == 74
    assert a.values["gpu.nvlink.crc_errors"] == 11
    assert a.values["gpu.throttle.thermal"] == 1.0  # HW thermal slowdown bit
    assert a.values["gpu.throttle.power"] == 1.0  # SW power cap bit
    assert b.values["gpu.throttle.thermal"] == 0.0
    assert (b.values["gpu.rows.remapped.correctable"], b.values["gpu.rows.remapped.uncorrectable"],
            b.values["gpu.rows.remap.pending"]) == (2, 1, 1)
    assert (b.index, b.uuid) == (1, "GPU-b")


def test_unsupported_metric_is_left_out_and_not_asked_again(
        caplog: pytest.LogCaptureFixture) -> None:
    reader, _ = _reader(FakeDevice(uuid="GPU-a", unsupported={"pcie", "nvlink"}))
    with caplog.at_level(logging.INFO, logger="trainer.gpu"):
        first = reader.sample()[0]
        second = reader.sample()[0]
    assert "gpu.pcie.replay" not in first.values and "gpu.nvlink.crc_errors" not in first.values
    assert set(first.values) == CANONICAL - {"gpu.pcie.replay", "gpu.nvlink.crc_errors"}
    assert set(second.values) == set(first.values)
    assert sum("not supported" in r.message for r in caplog.records) == 2
    assert reader.unsupported == {(0, "gpu.pcie.replay"): "not supported",
                                  (0, "gpu.nvlink.crc_errors"): "not supported"}


def test_lost_gpu_is_skipped_while_others_are_read() -> None:
    reader, fake = _reader(FakeDevice(uuid="GPU-a"), FakeDevice(uuid="GPU-b"))
    fake.devices[0].lost = True
    samples = reader.sample()
    assert [s.uuid for s in samples] == ["GPU-b"]


def test_xid_events_are_drained_without_blocking() -> None:
    reader, fake = _reader(FakeDevice(uuid="GPU-a"), FakeDevice(uuid="GPU-b"))
    assert reader.xids() == []
    fake.events += [(1, 48), (0, 79)]
    got = reader.xids()
    assert [(x.index, x.uuid, x.code) for x in got] == [(1, "GPU-b", 48), (0, "GPU-a", 79)]
    assert reader.xids() == []


def test_without_nvml_the_reader_stands_down_with_one_line(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="trainer.gpu"):
        reader = NvmlGpuReader(nvml=FakeNvml([], library_missing=True))
    assert not reader.available
    assert reader.devices() == () and reader.sample() == [] and reader.xids() == []
    reader.close()
    assert len([r for r in caplog.records if "NVML unavailable" in r.message]) == 1


def test_close_shuts_nvml_down_once() -> None:
    reader, fake = _reader(FakeDevice(uuid="GPU-a"))
    reader.close()
    reader.close()
    assert fake.shutdown_called
    assert reader.sample() == []


@pytest.mark.gpu
def test_real_gpu_reads_every_metric() -> None:
    reader = NvmlGpuReader()
    if not reader.devices():
        pytest.skip("no NVIDIA GPU on this machine")
    try:
        samples = reader.sample()
        assert len(samples) == len(reader.devices())
        for s in samples:
            missing = CANONICAL - set(s.values)
            # What NVML says this board lacks (NVLink on PCIe boards) is absent, not failing.
            failing = {m for m in missing if (s.index, m) not in reader.unsupported}
            assert not failing, f"GPU {s.index} could not read {failing}"
            assert 0.0 <= s.values["gpu.utilization"] <= 1.0
            assert 0 < s.values["gpu.temperature"] < 120
            assert s.values["gpu.power"] > 0
            assert s.values["gpu.clock.sm"] > 0
        assert isinstance(reader.xids(), list)
    finally:
        reader.close()
