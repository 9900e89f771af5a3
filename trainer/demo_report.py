"""What ``foreshock demo`` tells its user: a timeline of the run and a summary of what the
prediction saved, from the marks the demo collected (service, receiver, drain record)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table

STEP_LOSS_TARGET = 0
RESUME_TARGET_S = 15.0


@dataclass(frozen=True, kw_only=True)
class Mark:
    """One moment of the timeline."""

    t: float
    what: str
    detail: str = ""


@dataclass(kw_only=True)
class Reactive:
    """What a reactive restart from the last periodic checkpoint would have lost."""

    last_periodic_step: int
    step_at_failure: int
    steps_lost: int
    compute_lost_s: float
    restart_s: float | None = None
    """An elastic restart as measured in this run (drain or failure to training resumed)."""


@dataclass(kw_only=True)
class Summary:
    """The demo's figures; None where the run did not get that far."""

    ok: bool
    victim: str
    failure_at: float
    started_at: float
    alert_at: float | None = None
    lead_time_s: float | None = None
    drain_step: int | None = None
    resumed_from_step: int | None = None
    steps_lost: int | None = None
    alert_to_resumed_s: float | None = None
    finished_nodes: list[str] = field(default_factory=list)
    reactive: Reactive | None = None
    webhook_deliveries: int = 0
    webhook_rejected: int = 0
    missing: list[str] = field(default_factory=list)
    timeline: list[Mark] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["timeline"] = [{"t": round(m.t - self.started_at, 2), "what": m.what,
                            "detail": m.detail} for m in sorted(self.timeline, key=lambda m: m.t)]
        return out


def reactive_loss(*, step_at_failure: float, every_steps: int,
                  step_period_s: float) -> Reactive:
    """Work since the last periodic checkpoint before the failure, redone after a restart."""
    at = math.floor(step_at_failure)
    last = (at // every_steps) * every_steps if every_steps > 0 else 0
    return Reactive(last_periodic_step=last, step_at_failure=at, steps_lost=at - last,
                    compute_lost_s=round((at - last) * step_period_s, 1))


def figures(events: list[dict[str, Any]], summary: Summary, *, checkpoint_every: int,
        step_period_s: float, nodes: int) -> None:
    """Fill in the summary's figures from the job's drain record (``read_events``)."""
    if summary.alert_at is not None:
        summary.lead_time_s = round(summary.failure_at - summary.alert_at, 1)
        if summary.lead_time_s <= 0:
            summary.lead_time_s = None
    first = next((e for e in events if e["event"] == "started"), None)
    restart_s: float | None = None
    drain = next((e for e in events if e["event"] == "drain"), None)
    resumed = next((e for e in events if e["event"] == "resumed"), None)
    if drain is not None:
        summary.drain_step = int(drain["step"])
        restart = next((e for e in events if e["event"] == "started" and e["ts"] > drain["ts"]),
                       None)
        if restart is not None and restart.get("checkpoint"):
            summary.resumed_from_step = int(str(restart["checkpoint"]).split("-")[-1])
            summary.steps_lost = summary.drain_step - summary.resumed_from_step
            restart_s = round(restart["ts"] - drain["ts"], 1)
    if resumed is not None and summary.alert_at is not None:
        summary.alert_to_resumed_s = round(resumed["ts"] - summary.alert_at, 1)
    if first is not None:
        # Where the job would have been when the failure struck, at its measured pace.
        ref = drain if drain is not None and drain["ts"] > first["ts"] else None
        rate = ((ref["step"] - first["step"]) / (ref["ts"] - first["ts"]) if ref
                else 1.0 / step_period_s)
        base = ref or first
        at_failure = base["step"] + rate * (summary.failure_at - base["ts"])
        summary.reactive = reactive_loss(step_at_failure=at_failure,
                                         every_steps=checkpoint_every,
                                         step_period_s=step_period_s)
        if drain is None:
            # No drain: the failure struck and the job took the reactive path for real.
            restart = next((e for e in events if e["event"] == "started"
                            and e["ts"] > summary.failure_at), None)
            if restart is not None:
                from_step = int(str(restart.get("checkpoint") or "step-0").split("-")[-1])
                summary.resumed_from_step = from_step
                summary.steps_lost = max(0, int(at_failure) - from_step)
                restart_s = round(restart["ts"] - summary.failure_at, 1)
        summary.reactive.restart_s = restart_s
    if summary.alert_at is None:
        summary.missing.append(f"no signed alert for {summary.victim} reached the receiver "
                               "(scoring, model or webhook delivery did not flag it)")
    summary.ok = (summary.lead_time_s is not None and summary.steps_lost == 0
                  and resumed is not None and len(summary.finished_nodes) == nodes - 1)


def alert_detail(payload: dict[str, Any], node: str) -> str:
    """One line about ``node``'s alert in an Alertmanager-format webhook payload."""
    for alert in payload.get("alerts", []):
        if alert.get("labels", {}).get("node") == node:
            a = alert.get("annotations", {})
            return (f"{alert['labels'].get('alertname', '')} {node} GPU "
                    f"{alert['labels'].get('gpu', '?')}: risk {a.get('risk', '?')}, "
                    f"signals {a.get('signals', '')}")
    return ""


def _s(v: float | None, unit: str = "s") -> str:
    return "—" if v is None else f"{v:.1f} {unit}"


def render(summary: Summary, console: Console) -> None:
    """The timeline and the summary as tables."""
    timeline = Table(title="Timeline", title_justify="left", show_edge=False)
    timeline.add_column("t", justify="right")
    timeline.add_column("event")
    timeline.add_column("detail", overflow="fold")
    for m in sorted(summary.timeline, key=lambda m: m.t):
        timeline.add_row(f"{m.t - summary.started_at:6.1f} s", m.what, m.detail)
    console.print(timeline)

    table = Table(title="Summary", title_justify="left", show_edge=False, show_header=False)
    table.add_column("figure")
    table.add_column("value")
    lead = summary.lead_time_s
    table.add_row("drained node", summary.victim if summary.drain_step is not None else "none")
    table.add_row("lead time (alert before the failure)",
                  "not flagged before the failure" if lead is None else _s(lead))
    table.add_row("steps lost (target 0)", "—" if summary.steps_lost is None
                  else str(summary.steps_lost))
    table.add_row(f"alert → training resumed (target ≤ {RESUME_TARGET_S:.0f} s)",
                  _s(summary.alert_to_resumed_s))
    if summary.reactive is not None:
        r = summary.reactive
        table.add_row("a reactive restart would have lost",
                      f"{r.steps_lost} steps ({r.compute_lost_s:.1f} s of training since "
                      f"periodic checkpoint step {r.last_periodic_step}) plus the restart"
                      + ("" if r.restart_s is None else f" ({r.restart_s:.1f} s here)"))
    table.add_row("training finished on", ", ".join(summary.finished_nodes) or "—")
    table.add_row("signed webhooks received", f"{summary.webhook_deliveries} verified, "
                  f"{summary.webhook_rejected} rejected")
    for item in summary.missing:
        table.add_row("[yellow]missing[/yellow]", item)
    table.add_row("result", "[green]loop closed[/green]" if summary.ok
                  else "[red]loop not closed[/red]")
    console.print(table)
