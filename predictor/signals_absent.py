"""Fleets that export less: a trace with whole signals taken out, as a user's own history may
come (``../shared/fleet-trace.md``: every file but ``gpu.csv.gz`` is optional, and any ``gpu.*``
column may be absent).

A DCGM/Prometheus dump often has no training-step times (no hook in the job), no XID events,
bandwidth-only link probes, or GPUs without row remapping (before Ampere) or NVLink (PCIe
cards). ``without`` takes such signals out of a trace, so that a backtest can show what the
model predicts on a fleet that never exported them.
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from collector.fleet_trace import FleetTrace, empty_frame

ABSENT: dict[str, tuple[str, tuple[str, ...]]] = {
    "ecc": ("gpu.csv.gz", ("gpu.ecc.sbe", "gpu.ecc.dbe")),
    "node": ("node.csv.gz", ()),
    "compute": ("node.csv.gz", ("train.compute.duration",)),
    "events": ("events.csv", ()),
    "links": ("links.csv.gz", ()),
    "latency": ("links.csv.gz", ("net.link.latency",)),
    "remap": ("gpu.csv.gz", ("gpu.rows.remapped.correctable", "gpu.rows.remapped.uncorrectable",
                             "gpu.rows.remap.pending")),
    "nvlink": ("gpu.csv.gz", ("gpu.nvlink.crc_errors",)),
    "pcie": ("gpu.csv.gz", ("gpu.pcie.replay",)),
    "throttle": ("gpu.csv.gz", ("gpu.throttle.thermal", "gpu.throttle.power")),
}
"""Signal name -> (the file it lives in, its columns there; () for the whole file)."""

FRAME_OF: dict[str, str] = {
    "gpu.csv.gz": "gpu", "node.csv.gz": "node", "links.csv.gz": "links", "events.csv": "events"}
"""Trace file -> the ``FleetTrace`` frame that holds it."""


def without(trace: FleetTrace, signals: tuple[str, ...] | list[str]) -> FleetTrace:
    """``trace`` with each of ``signals`` (names of ``ABSENT``) taken out: a whole optional
    file left empty, or metric columns dropped. Ground truth is kept."""
    unknown = [s for s in signals if s not in ABSENT]
    if unknown:
        raise ValueError(f"unknown signal {unknown[0]!r}; known: {', '.join(ABSENT)}")
    frames: dict[str, pd.DataFrame] = {}
    for name in signals:
        file, columns = ABSENT[name]
        attr = FRAME_OF[file]
        frame = frames.get(attr, getattr(trace, attr))
        frames[attr] = (frame.drop(columns=[c for c in columns if c in frame.columns])
                        if columns else empty_frame(file))
    return replace(trace, **frames,  # type: ignore[arg-type]  # frame names only
                   events_exported=trace.events_exported and "events" not in signals)


def absent(trace: FleetTrace) -> list[str]:
    """The signals of ``ABSENT`` that ``trace`` does not export: ``without``'s inverse reading.
    A whole file counts as absent when it has no rows (``events.csv`` when no log was kept, as an
    empty log says that no event happened), columns when none of them is there."""
    gone = []
    for name, (file, columns) in ABSENT.items():
        frame = getattr(trace, FRAME_OF[file])
        if columns:
            lacking = not set(columns) & set(frame.columns)
        else:
            lacking = not trace.events_exported if file == "events.csv" else not len(frame)
        if lacking:
            gone.append(name)
    return gone


NOTES: dict[str, str] = {
    "ecc": "no gpu.ecc.sbe or gpu.ecc.dbe (dcgm-exporter's default counters leave ECC out): a "
           "GPU whose memory gives way shows only in its row remaps and XIDs, and is warned of "
           "later or missed",
    "nvlink": "no gpu.nvlink.crc_errors (dcgm-exporter's default counters leave it out): a "
              "failing NVLink shows only in its XIDs, and is warned of later or missed",
    "throttle": "no gpu.throttle.thermal or gpu.throttle.power (dcgm-exporter's default counters "
                "leave the clock-event reasons out): a node that overheats shows only in its "
                "temperatures and clocks, and is warned of later or missed",
    "events": "no events.csv: XID counts read as unknown, so a failure that shows first in its "
              "XIDs (a short ECC ramp) is warned of later or missed",
    "node": "no node.csv (no training hook): nodes are scored by the node model made for fleets "
            "without compute times, which tells a node under a lower power limit from a "
            "failing supply on its heat and power alone; a node failure that shows first in "
            "slower compute is warned of later or missed",
    "compute": "node.csv has no train.compute.duration: nodes are scored by the node model made "
               "for fleets without compute times (step times alone cannot tell one slow node in "
               "a synchronous job, whose step every node shares)",
    "links": "no links.csv: no link probes, so a failing NIC or cable shows only when it slows "
             "the job",
    "latency": "links.csv has no net.link.latency: links read on bandwidth alone, and a failing "
               "NIC is warned of later or missed",
}
"""Signal -> what its absence costs (measured in predictor/README.md, "Fleets that export
less"), for the signals whose absence moved the figures."""


def missing(trace: FleetTrace) -> list[str]:
    """Notes on what ``trace`` does not export that the model reads (``NOTES``), for a backtest
    to show before its figures are taken as the model's."""
    return [NOTES[name] for name in absent(trace) if name in NOTES]
