"""The failure mix and repair times the fleet generator draws from, and the evidence behind them.

Two public sources, mapped onto the failure *modes* the generator can simulate (each mode is a
telemetry signature, see ``predictor/signatures.py``):

* Llama 3 (Dubey et al., "The Llama 3 Herd of Models", arXiv 2407.21783, Table 5): 466 job
  interruptions in 54 days of pre-training on 16,384 H100s, 419 of them unexpected. Shares of
  the unexpected ones: faulty GPU 30.1%, GPU HBM3 memory 17.2%, software bug 12.9%, network
  switch/cable 8.4%, host maintenance 7.6%, GPU SRAM memory 4.5%, GPU system processor 4.1%,
  NIC 1.7%, NCCL watchdog timeouts 1.7%, silent data corruption 1.4%, GPU thermal interface
  and sensor 1.4%, SSD 0.7%, power supply 0.7%, server chassis 0.5%, IO expansion board 0.5%,
  dependency 0.5%, CPU 0.5%, system memory 0.5%.
* StepFun InfiniteHBD fault trace (arXiv 2502.03885; ``../shared/data/stepfun-fault-trace/``):
  584 node faults on 400 servers over 349 days (4.2 per 1,000 node-days) with start, repair end
  and a Level/Class/Desc cause. :func:`derive_stepfun` (``python -m predictor.failure_mix
  ../shared/data/stepfun-fault-trace/fault_trace.json``) recomputes the counts and repair-time
  quantiles below from ``fault_trace.json``; ``tests/predictor/test_generator.py`` checks that
  the committed constants still match the file.

Llama 3's "faulty GPU" row has no breakdown, so it is split like StepFun's GPU faults
(unknown error, xid, nvidia-smi timeout -> sudden; PCI link width low, GPU lost -> PCIe; P2P
bandwidth low -> NVLink; temperature high -> thermal). The two sources get equal weight.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Literal

import numpy as np

Mode = Literal[
    "ecc", "thermal", "nvlink", "pcie", "gpu_sudden", "power", "fan", "nic", "node_sudden"
]
MODES: tuple[Mode, ...] = (
    "ecc", "thermal", "nvlink", "pcie", "gpu_sudden", "power", "fan", "nic", "node_sudden"
)
FailureKind = Literal["gpu", "link", "node"]
MODE_KIND: dict[Mode, FailureKind] = {
    "ecc": "gpu", "thermal": "gpu", "nvlink": "gpu", "pcie": "gpu", "gpu_sudden": "gpu",
    "power": "node", "fan": "node", "nic": "link", "node_sudden": "node",
}

# Llama 3 Table 5, percent of the 419 unexpected interruptions, by mode.
_LLAMA3_FAULTY_GPU = 30.1
_LLAMA3: dict[Mode, float] = {
    "ecc": 17.2 + 4.5,  # GPU HBM3 memory + GPU SRAM memory
    "gpu_sudden": 4.1 + 1.4,  # GPU system processor (XID 119/120) + silent data corruption
    "thermal": 1.4,  # GPU thermal interface + sensor
    "nic": 8.4 + 1.7,  # network switch/cable + NIC
    "power": 0.7,  # power supply
    # software bug, host maintenance, NCCL watchdog, SSD, chassis, IO board, dependency, CPU, RAM
    "node_sudden": 12.9 + 7.6 + 1.7 + 0.7 + 0.5 + 0.5 + 0.5 + 0.5 + 0.5,
}

# StepFun fault_trace.json, number of faults by mode (derive_stepfun() reproduces these).
STEPFUN_COUNTS: dict[Mode, int] = {
    "ecc": 61, "thermal": 2, "nvlink": 3, "pcie": 31, "gpu_sudden": 61, "power": 26,
    "fan": 33, "nic": 74, "node_sudden": 293,
}
STEPFUN_FAULTS = 584
STEPFUN_NODE_DAYS = 400 * 349.0
"""400 servers over the 349 days the trace covers."""

# StepFun repair time (fault_start -> fault_end) quantiles in hours, all faults pooled, at
# probabilities REPAIR_PROBS; median 20 h, a long tail of weeks (RMAs). derive_stepfun() again.
REPAIR_PROBS: tuple[float, ...] = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0)
REPAIR_HOURS: tuple[float, ...] = (0.0, 0.23, 2.05, 20.39, 74.88, 308.47, 1784.74, 3143.13)

_STEPFUN_DESC_MODE: dict[str, Mode] = {
    "GPU DBE(Double Bit ECC) > Threshold": "ecc",
    "GPU SBE(Single Bit ECC) > Threshold": "ecc",
    "GPU Temperature High": "thermal",
    "GPU P2P Bandwidth Low": "nvlink",
    "GPU PCI link width low": "pcie",
    "GPU Lost": "pcie",
    "GPU device not found": "pcie",
    "GPU xid Error": "gpu_sudden",
    "GPU device unknow error": "gpu_sudden",
    "nvidia-smi Timeout": "gpu_sudden",
    "Silent Data Corruption": "gpu_sudden",
}
_STEPFUN_CLASS_MODE: dict[str, Mode] = {
    "Parameter Plane Cable": "nic", "NIC": "nic", "Power Supply": "power", "Fan": "fan",
}
_STEPFUN_CHANGE_MODE: dict[str, Mode] = {
    "Y-cables Taken offline": "nic", "Remote Optical Module Failure": "nic",
}


def _stepfun_mode(fault_type: dict[str, str]) -> Mode:
    desc, cls = fault_type.get("Desc", ""), fault_type.get("Class", "")
    if desc in _STEPFUN_DESC_MODE:
        return _STEPFUN_DESC_MODE[desc]
    if cls in _STEPFUN_CLASS_MODE:
        return _STEPFUN_CLASS_MODE[cls]
    return _STEPFUN_CHANGE_MODE.get(desc, "node_sudden")


def derive_stepfun(path: Path | str) -> tuple[dict[Mode, int], tuple[float, ...]]:
    """Mode counts and repair-hour quantiles (at REPAIR_PROBS) from StepFun's fault_trace.json."""
    events = json.loads(Path(path).read_text())
    counts: Counter[Mode] = Counter()
    open_faults: dict[str, float] = {}
    repairs_h: list[float] = []
    for ev in events:
        node, t = ev["node_id"], float(ev["event_time"])
        if ev["event_type"] == "fault_start":
            counts[_stepfun_mode(ev["fault_type"])] += 1
            open_faults[node] = t
        elif node in open_faults:
            repairs_h.append((t - open_faults.pop(node)) * 24.0)
    quantiles = np.quantile(np.asarray(repairs_h), REPAIR_PROBS)
    by_mode: defaultdict[Mode, int] = defaultdict(int, counts)
    return {m: by_mode[m] for m in MODES}, tuple(round(float(q), 2) for q in quantiles)


def default_mix() -> dict[str, float]:
    """Mode weights (summing to 1): Llama 3 and StepFun shares, averaged with equal weight.

    That is: node_sudden 0.385, gpu_sudden 0.181, ecc 0.167, nic 0.117, pcie 0.077, fan 0.028,
    power 0.026, thermal 0.012, nvlink 0.007.
    """
    gpu_modes: tuple[Mode, ...] = ("thermal", "nvlink", "pcie", "gpu_sudden")
    gpu = {m: STEPFUN_COUNTS[m] for m in gpu_modes}
    llama: dict[Mode, float] = dict.fromkeys(MODES, 0.0)
    llama.update(_LLAMA3)
    for m, n in gpu.items():  # split Llama 3's unexplained "faulty GPU" like StepFun's GPU faults
        llama[m] += _LLAMA3_FAULTY_GPU * n / sum(gpu.values())
    llama_total = sum(llama.values())
    step_total = sum(STEPFUN_COUNTS.values())
    return {m: 0.5 * llama[m] / llama_total + 0.5 * STEPFUN_COUNTS[m] / step_total for m in MODES}


def sample_repair_s(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` repair durations (seconds) from StepFun's empirical repair-time distribution."""
    u = rng.random(n)
    # Interpolating log-hours between quantiles keeps the heavy tail without storing every fault.
    log_h = np.interp(u, REPAIR_PROBS, np.log(np.maximum(REPAIR_HOURS, 0.05)))
    return np.exp(log_h) * 3600.0


if __name__ == "__main__":  # python -m predictor.failure_mix PATH/fault_trace.json
    import sys

    mode_counts, repair_quantiles = derive_stepfun(sys.argv[1])
    print(f"STEPFUN_COUNTS = {mode_counts}")
    print(f"STEPFUN_FAULTS = {sum(mode_counts.values())}")
    print(f"REPAIR_HOURS = {repair_quantiles}")
