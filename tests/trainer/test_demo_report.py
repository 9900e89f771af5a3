"""The demo's figures from a drain record: what the user reads in its summary."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from trainer.demo_report import Summary, figures, reactive_loss, render

T0 = 1_000_000.0


def _drained_run() -> list[dict[str, Any]]:
    return [
        {"ts": T0 + 10, "event": "started", "step": 1, "nodes": ["a", "b", "c"],
         "world_size": 3, "checkpoint": None},
        {"ts": T0 + 60, "event": "decision", "decision": 1, "node": "c", "step": 200},
        {"ts": T0 + 60.2, "event": "checkpoint", "step": 200, "path": "step-00000200",
         "reason": "drain c", "duration_s": 0.2},
        {"ts": T0 + 60.3, "event": "drain", "decision": 1, "node": "c", "step": 200,
         "nodes_left": ["a", "b"]},
        {"ts": T0 + 69, "event": "started", "step": 201, "nodes": ["a", "b"], "world_size": 2,
         "checkpoint": "step-00000200"},
        {"ts": T0 + 69, "event": "resumed", "step": 201, "decision": 1, "node": "c",
         "nodes": ["a", "b"]},
    ]


def test_a_drain_ahead_of_the_failure_loses_no_step() -> None:
    s = Summary(ok=False, victim="c", failure_at=T0 + 90, started_at=T0, alert_at=T0 + 58,
                finished_nodes=["a", "b"])
    figures(_drained_run(), s, checkpoint_every=40, step_period_s=0.25, nodes=3)
    assert s.ok and s.steps_lost == 0 and s.drain_step == s.resumed_from_step == 200
    assert s.lead_time_s == 32.0 and s.alert_to_resumed_s == 11.0
    # At ~4 steps/s the job would have reached step ~319 when the failure struck; the last
    # periodic checkpoint before it was step 280.
    assert s.reactive is not None and s.reactive.last_periodic_step == 280
    assert s.reactive.steps_lost == s.reactive.step_at_failure - 280 > 0
    assert s.reactive.restart_s == 8.7  # the elastic restart this run measured
    out = io.StringIO()
    render(s, Console(file=out, width=120))
    assert "loop closed" in out.getvalue() and "32.0 s" in out.getvalue()


def test_no_alert_means_the_failure_strikes_and_the_summary_says_so() -> None:
    events = [_drained_run()[0],
              {"ts": T0 + 100, "event": "started", "step": 321, "nodes": ["a", "b"],
               "world_size": 2, "checkpoint": "step-00000320"}]
    s = Summary(ok=False, victim="c", failure_at=T0 + 90, started_at=T0,
                finished_nodes=["a", "b"])
    figures(events, s, checkpoint_every=40, step_period_s=0.25, nodes=3)
    assert not s.ok and s.lead_time_s is None
    assert s.resumed_from_step == 320 and s.steps_lost == 1 + 80 * 4 - 320
    assert any("no signed alert" in m for m in s.missing)


def test_reactive_loss_counts_back_to_the_last_periodic_checkpoint() -> None:
    r = reactive_loss(step_at_failure=119.7, every_steps=50, step_period_s=0.5)
    assert (r.last_periodic_step, r.step_at_failure, r.steps_lost, r.compute_lost_s) == (
        100, 119, 19, 9.5)
