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
    "node": ("node.csv.gz", ()),
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


def missing(trace: FleetTrace) -> list[str]:
    """What ``trace`` does not export that the model reads, each with what its absence costs
    (measured in predictor/README.md, "Fleets that export less"): notes for a backtest to show
    before its figures are taken as the model's."""
    notes = []
    if not trace.events_exported:
        notes.append("no events.csv: XID counts read as unknown, so a failure that shows first "
                     "in its XIDs (a short ECC ramp) is warned of later or missed")
    if not len(trace.node):
        notes.append("no node.csv (no training hook): without step times a node under a lower "
                     "power limit can read as a failing supply, and false alerts rise")
    if not len(trace.links):
        notes.append("no links.csv: no link probes, so a failing NIC or cable shows only when "
                     "it slows the job")
    elif "net.link.latency" not in trace.links.columns:
        notes.append("links.csv has no net.link.latency: links read on bandwidth alone, and a "
                     "failing NIC is warned of later or missed")
    return notes
