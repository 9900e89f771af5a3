"""The predictor's data commands: ``generate-trace`` (labelled synthetic traces), ``evaluate``
and ``goodput`` (alerts priced in training time)."""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from collector.outputs import output_dir, output_file
from predictor.failure_mix import MODES
from predictor.generator_config import DEFAULT_START_TS, PRECURSOR_SHAPES, GeneratorConfig
from predictor.goodput import GoodputConfig

if TYPE_CHECKING:
    import pandas as pd
    from rich.table import Table

    from predictor.evaluate import EvaluationReport
    from predictor.goodput import Goodput


_COSTS = GoodputConfig()
"""``foreshock goodput``'s default costs."""
_MAPPINGS = ("mix", "precursor_share", "precursor_shapes")
"""GeneratorConfig fields that take KEY=WEIGHT lists of their own options, not ``--set``."""


def _weights(option: str, text: str | None,
             keys: tuple[str, ...] = MODES) -> dict[str, float] | None:
    """``"ecc=2,nic=1"`` -> {"ecc": 2.0, "nic": 1.0}."""
    if text is None:
        return None
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep:
            raise typer.BadParameter(f"{part!r} is not KEY=NUMBER (keys: {', '.join(keys)})",
                                     param_hint=option)
    return out


def _overrides(items: list[str]) -> dict[str, object]:
    """``--set field=value`` pairs, converted to the type of the GeneratorConfig field."""
    fields = {f.name: f for f in dataclasses.fields(GeneratorConfig)}
    out: dict[str, object] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in fields or key in _MAPPINGS:
            raise typer.BadParameter(
                f"{item!r}: expected FIELD=VALUE with FIELD one of "
                f"{', '.join(n for n in fields if n not in _MAPPINGS)}",
                param_hint="--set")
        try:
            out[key] = int(value) if key in ("seed", "nodes", "gpus_per_node", "rack_size",
                                             "failure_count") else float(value)
        except ValueError as exc:
            raise typer.BadParameter(f"{item!r}: {value!r} is not a number",
                                     param_hint="--set") from exc
    return out


def generate_trace_cmd(
    out_dir: Annotated[Path, typer.Argument(help="Directory to write the trace into (created).")],
    seed: Annotated[int, typer.Option(help="Random seed; same seed and options, same trace.")] = 0,
    nodes: Annotated[int, typer.Option(help="Nodes in the job.")] = 32,
    gpus: Annotated[int, typer.Option(help="GPUs per node.")] = 8,
    days: Annotated[float, typer.Option(help="Length of the trace in days.")] = 2.0,
    interval: Annotated[float, typer.Option(help="GPU/node sampling interval, seconds.")] = 30.0,
    link_interval: Annotated[float, typer.Option(help="Link probe interval, seconds.")] = 300.0,
    failures: Annotated[float, typer.Option(
        help="Failure rate per 1,000 node-days (real fleets: 2-7; raise it for small traces).",
    )] = 4.2,
    failure_count: Annotated[int | None, typer.Option(
        help="Exact number of failures instead of drawing from --failures.")] = None,
    mix: Annotated[str | None, typer.Option(
        help=f"Failure-mode weights MODE=W,... (modes: {', '.join(MODES)}). "
             "Default: Llama 3 + StepFun mix.")] = None,
    precursor_share: Annotated[str | None, typer.Option(
        help="Per-mode probability of a precursor, MODE=P,... (others keep their default).",
    )] = None,
    precursor_shapes: Annotated[str | None, typer.Option(
        help=f"How precursors grow, SHAPE=W,... (shapes: {', '.join(PRECURSOR_SHAPES)}; "
             "e.g. ramp=1,episodic=1 for half of each). Default: ramps only.")] = None,
    precursor_min: Annotated[float, typer.Option(help="Shortest precursor, seconds.")] = 600.0,
    precursor_max: Annotated[float, typer.Option(help="Longest precursor, seconds.")] = 28800.0,
    intensity_min: Annotated[float, typer.Option(help="Weakest precursor intensity.")] = 0.3,
    intensity_max: Annotated[float, typer.Option(help="Strongest precursor intensity.")] = 3.0,
    noise: Annotated[float, typer.Option(help="Multiplier on measurement noise.")] = 1.0,
    confounders: Annotated[float, typer.Option(
        help="Multiplier on every confounder rate (0 = none).")] = 1.0,
    repair_scale: Annotated[float, typer.Option(
        help="Multiplier on repair times (StepFun distribution, median 20 h).")] = 1.0,
    start: Annotated[float, typer.Option(help="Unix time of the first sample.")] = DEFAULT_START_TS,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="Any other GeneratorConfig field as FIELD=VALUE, e.g. stalls_per_day=4 "
                      "(repeatable).")] = None,
) -> None:
    """Write a synthetic, labelled fleet trace (fleet-trace/1 with failures.csv)."""
    from rich.console import Console

    from predictor.generator import generate, write_generated

    console = Console(stderr=True, soft_wrap=True)
    share = dict(GeneratorConfig().precursor_share)
    share.update(_weights("--precursor-share", precursor_share) or {})
    kwargs: dict[str, object] = {
        "seed": seed, "nodes": nodes, "gpus_per_node": gpus, "days": days, "interval_s": interval,
        "link_interval_s": link_interval, "failure_rate": failures,
        "failure_count": failure_count, "precursor_share": share,
        "precursor_min_s": precursor_min, "precursor_max_s": precursor_max,
        "intensity_min": intensity_min, "intensity_max": intensity_max, "noise": noise,
        "confounders": confounders, "repair_scale": repair_scale, "start_ts": start,
    }
    mix_weights = _weights("--mix", mix)
    if mix_weights is not None:
        kwargs["mix"] = mix_weights
    shapes = _weights("--precursor-shapes", precursor_shapes, PRECURSOR_SHAPES)
    if shapes is not None:
        kwargs["precursor_shapes"] = shapes
    kwargs.update(_overrides(set_ or []))
    try:
        config = GeneratorConfig(**kwargs)  # type: ignore[arg-type]
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    output_dir(out_dir, "OUT_DIR")
    began = time.perf_counter()
    with console.status("generating fleet trace..."):
        generated = generate(config)
        write_generated(out_dir, generated)
    trace = generated.trace
    failures_df = trace.failures
    n_fail = 0 if failures_df is None else len(failures_df)
    with_pre = 0 if failures_df is None else int((failures_df["precursor_s"] > 0).sum())
    console.print(
        f"wrote {out_dir}: {len(trace.gpu):,} GPU rows, {len(trace.node):,} node rows, "
        f"{len(trace.links):,} link probes, {len(trace.events):,} events, {n_fail} failures "
        f"({with_pre} with a precursor) in {time.perf_counter() - began:.1f} s"
    )


def evaluate_cmd(
    trace_dir: Annotated[Path, typer.Argument(
        help="Fleet-trace directory with failures.csv (the ground truth).")],
    alerts: Annotated[Path, typer.Option(
        help="alerts.csv written by a backtest (ts,node,gpu,kind,score,reason).")],
    failures_from_xids: Annotated[bool, typer.Option(
        "--failures-from-xids", help="Take the trace's fatal XIDs (48, 79, 94, 95, 119, 120) "
        "as its failures instead of failures.csv: for a fleet's own history kept without a "
        "failure log (foreshock from-prometheus). A node's fatal XIDs less than 6 hours apart are "
        "one failure; precursors are unknown, so recall with a precursor is not reported.")
    ] = False,
    json_: Annotated[bool, typer.Option("--json", help="Print the figures as JSON.")] = False,
    details: Annotated[bool, typer.Option(
        "--details", help="Also list every failure (caught or missed, lead, the first alert) and "
                          "every alert episode not followed by a failure (false or late): "
                          "what to read before changing a threshold. With --json, as the "
                          "'failures' and 'episodes' lists.")] = False,
) -> None:
    """Score alerts against a trace's failures: recall, precision, false episodes, lead time."""
    from rich.console import Console

    from collector.fleet_trace import TraceFormatError
    from predictor.evaluate import AlertsFormatError, outcomes, read_alerts, summarize

    try:
        frame = read_alerts(alerts)
        out = outcomes(trace_dir, frame, source=str(alerts), from_xids=failures_from_xids)
    except (TraceFormatError, AlertsFormatError) as exc:
        Console(stderr=True, soft_wrap=True).print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(2) from exc
    report = summarize(out, alerts=len(frame))
    if json_:
        if not details:
            typer.echo(report.to_json())
        else:
            typer.echo(json.dumps({**json.loads(report.to_json()),
                                   "failures": _records(out.failures),
                                   "episodes": _records(out.episodes)}, indent=2))
        return
    console = Console()
    console.print(_report_table(report, title=f"{trace_dir} vs {alerts}"))
    if details:
        console.print(_failures_table(out.failures))
        console.print(_episodes_table(out.episodes))


def _records(frame: pd.DataFrame) -> list[dict[str, object]]:
    """Rows as plain Python values, NaN and NA as None (JSON null)."""
    import pandas as pd

    out = []
    for row in frame.astype(object).to_dict("records"):
        clean: dict[str, object] = {}
        for key, value in row.items():
            if value is pd.NA or (isinstance(value, float) and math.isnan(value)):
                value = None
            clean[str(key)] = value.item() if hasattr(value, "item") else value
        out.append(clean)
    return out


def _when(ts: object) -> str:
    return time.strftime("%m-%d %H:%M", time.gmtime(float(ts)))  # type: ignore[arg-type]


def _minutes(seconds: object) -> str:
    return "-" if seconds is None else f"{float(seconds) / 60:,.0f} min"  # type: ignore[arg-type]


def _details_table(title: str, columns: tuple[str, ...]) -> Table:
    from rich import box
    from rich.table import Table

    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                  collapse_padding=True)
    for col in columns:
        table.add_column(col, no_wrap=True)
    return table


def _failures_table(failures: pd.DataFrame) -> Table:
    caught = int(failures["caught"].sum())
    table = _details_table(
        f"Failures: {caught} of {len(failures)} caught (UTC; lead from the earliest alert 6 h to "
        "60 s before; named: an alert named the failing GPU)",
        ("failed", "node", "part", "precursor", "lead", "alert", "estimate", "named"))
    for r in _records(failures):
        table.add_row(
            _when(r["ts"]), str(r["node"]),
            str(r["kind"]) if r["gpu"] == -1 else f"{r['kind']} {r['gpu']}",
            "none" if r["precursor_s"] == 0 else _minutes(r["precursor_s"]),  # "-": not known
            _minutes(r["lead_s"]) if r["caught"] else "[red]missed[/red]",
            f"{r['alert_kind']} {r['alert_score']:.2f}" if r["caught"] else "",
            _minutes(r["lead_estimate_s"]) if r["caught"] else "",
            {None: "", True: "yes", False: "no"}[r["gpu_named"]])  # type: ignore[index]
    return table


def _episodes_table(episodes: pd.DataFrame) -> Table:
    bad = episodes[episodes["verdict"] != "true"]
    table = _details_table(
        f"Episodes with no failure 60 s to 6 h after their start: {len(bad)} of {len(episodes)} "
        "(late: the node failed within 60 s)",
        ("from", "node", "kinds", "top risk", "rows", "lasted", "verdict"))
    for r in _records(bad):
        table.add_row(_when(r["start"]), str(r["node"]), str(r["kinds"]),
                      f"{r['max_score']:.2f}", str(r["rows"]),
                      _minutes(float(r["end"]) - float(r["start"])),  # type: ignore[arg-type]
                      str(r["verdict"]))
    return table


def _report_table(report: EvaluationReport, *, title: str) -> Table:
    from rich.table import Table

    from predictor.evaluate import format_value as fmt

    table = Table(title=title, title_justify="left")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_column("from", style="dim")
    r = report
    table.add_row("recall (all failures)", fmt(r.recall, percent=True), f"{r.caught}/{r.failures}")
    table.add_row("recall (with a precursor)", fmt(r.recall_precursor, percent=True),
                  f"{r.caught_with_precursor}/{r.failures_with_precursor}")
    for kind, value in r.recall_by_kind.items():
        table.add_row(f"  recall, {kind} failures", fmt(value, percent=True), "")
    for band, (caught, total) in r.caught_by_precursor.items():
        table.add_row(f"  precursor {band}", fmt(caught / total, percent=True),
                      f"{caught}/{total}")
    table.add_row("precision (episodes)", fmt(r.precision, percent=True),
                  f"{r.true_episodes} true, {r.false_episodes} false, {r.late_episodes} late "
                  f"of {r.episodes}")
    table.add_row("false episodes / 1,000 node-days", fmt(r.false_per_1000_node_days),
                  f"{r.false_episodes} over {r.node_days:,.1f} node-days")
    table.add_row("median lead time", fmt(r.median_lead_s, seconds=True),
                  f"{r.caught} caught failures")
    if r.lead_estimates:
        table.add_row("lead estimate, times off (median)", fmt(r.lead_estimate_factor),
                      f"{r.lead_estimates} caught failures with an estimate")
        table.add_row("  within 2x", fmt(r.lead_estimate_within_2x, percent=True), "")
        table.add_row("  failed sooner than estimated", fmt(r.lead_estimate_too_long,
                                                           percent=True), "")
    table.add_row("GPU named right", fmt(r.gpu_accuracy, percent=True),
                  f"{r.gpu_named_right}/{r.gpu_failures_caught} caught GPU failures")
    table.add_row("alert rows", f"{r.alerts:,}", "")
    return table


def _labelled(spec: str) -> tuple[str, Path]:
    """``"rules=r.csv"`` -> ("rules", r.csv); a bare path is labelled by its file name."""
    label, sep, path = spec.partition("=")
    return (label, Path(path)) if sep and label else (Path(spec).stem, Path(spec))


def goodput_cmd(
    trace_dir: Annotated[Path, typer.Argument(
        help="Fleet-trace directory with failures.csv (the ground truth).")],
    alerts: Annotated[list[str], typer.Option(
        help="alerts.csv of a backtest, as LABEL=PATH or PATH (labelled by its file name); "
             "repeat it to compare several, e.g. --alerts model=a.csv --alerts rules=r.csv.")],
    plot_path: Annotated[Path | None, typer.Option(
        "--plot", help="Also draw the GPU-hours each scenario loses, by cause, as a PNG.")]
    = None,
    json_: Annotated[bool, typer.Option("--json", help="Print the figures as JSON.")] = False,
    checkpoint_every: Annotated[float, typer.Option(
        help="Seconds between the job's periodic checkpoints: an unwarned failure loses half "
             "of it on every GPU, on average.")] = _COSTS.checkpoint_every_s,
    restart: Annotated[float, typer.Option(
        help="Seconds from an unwarned failure to training again (hang noticed, job "
             "rescheduled, checkpoint loaded), on every GPU.")] = _COSTS.restart_s,
    checkpoint: Annotated[float, typer.Option(
        help="Seconds an on-demand checkpoint before a drain stalls the job.")]
    = _COSTS.checkpoint_s,
    drain: Annotated[float, typer.Option(
        help="Seconds after a drain until the job trains again on the other nodes "
             "(re-rendezvous).")] = _COSTS.drain_s,
    false_drain_out: Annotated[float, typer.Option(
        help="Seconds a drained node is out before it is returned; a healthy one costs its "
             "GPUs for that long, and one whose alert still stands then drains again.")]
    = _COSTS.false_drain_out_s,
    failure_rate: Annotated[float | None, typer.Option(
        min=0, max=1000,
        help="Scale what failures cost to this many failures per 1,000 node-days (real "
             "fleets: 2-7; StepFun's trace 4.2; at most one a node a day), at the same recall "
             "and leads, for a synthetic trace whose rate was raised; false alarms stay as "
             "they were. Default: the trace's own rate.")] = None,
    drain_at: Annotated[float, typer.Option(
        min=0, max=1, help="An alert drains its node once its risk reaches this, as in the "
                           "service; an episode that never does only alerts, and saves and "
                           "costs nothing. 0: every alert drains.")]
    = _COSTS.drain_at,
    drains_per_hour: Annotated[int, typer.Option(
        min=0, help="At most this many drains of the job in any hour, as in the service; an "
                    "alert held by it drains later in its episode if the hour allows.")]
    = _COSTS.drains_per_hour,
    drain_again_after: Annotated[float, typer.Option(
        min=0, help="Seconds after its last drain before a node back in the job drains again "
                    "for an alert that still stands, as in the service.")]
    = _COSTS.drain_again_after_s,
) -> None:
    """Price alerts in training time: goodput with no prediction, each set of alerts, all foreseen.

    The goodput of one job across the trace's nodes with no prediction, with each set of alerts
    (a caught failure costs a drain, a missed one a rollback to the last checkpoint and a restart,
    a false alarm a healthy node drained), and with every precursor foreseen. Alerts drain as the
    service's decisions would: --drain-at and --drains-per-hour default to its
    FORESHOCK_DRAIN_RISK_THRESHOLD and FORESHOCK_DRAIN_MAX_PER_HOUR, and a node back from its
    --false-drain-out with its alert still standing drains again once --drain-again-after
    (FORESHOCK_DRAIN_AGAIN_AFTER_S) has passed since its last drain. The model behind it is in
    predictor/goodput.py."""
    from rich.console import Console

    from collector.fleet_trace import TraceFormatError, read_trace
    from predictor.evaluate import AlertsFormatError, read_alerts
    from predictor.goodput import compare, failure_scale, plot, rescaled, to_json

    err = Console(stderr=True, soft_wrap=True)
    try:
        config = GoodputConfig(checkpoint_every_s=checkpoint_every, restart_s=restart,
                               checkpoint_s=checkpoint, drain_s=drain,
                               false_drain_out_s=false_drain_out, drain_at=drain_at,
                               drains_per_hour=drains_per_hour,
                               drain_again_after_s=drain_again_after)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    if plot_path is not None:
        output_file(plot_path, "'--plot'")
    specs = [_labelled(a) for a in alerts]
    labels = [label for label, _ in specs]
    if len(set(labels)) != len(labels):
        raise typer.BadParameter(f"labels {labels} repeat one: give each LABEL=PATH its own "
                                 "label", param_hint="--alerts")
    try:
        trace = read_trace(trace_dir, with_failures=True)
        found = {label: read_alerts(path) for label, path in specs}
        results = compare(trace, found, config,
                          sources={label: str(path) for label, path in specs})
    except (TraceFormatError, AlertsFormatError) as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(2) from exc
    scope = (f"one job on every node, drained at risk {drain_at:g} or more, at most "
             f"{drains_per_hour} an hour")
    if failure_rate is not None:
        scale = failure_scale([trace], failure_rate)
        results = [rescaled(r, scale) for r in results]
        scope += f", failures scaled to {failure_rate:g} per 1,000 node-days"
    if plot_path is not None:
        plot(results, plot_path, title=f"{trace_dir.name}: {len(trace.meta.nodes)} nodes, "
             f"{(trace.meta.end - trace.meta.start) / 86400:.1f} days; {scope}")
        err.print(f"wrote {plot_path}", highlight=False)
    if json_:
        typer.echo(to_json(results, config, failure_rate=failure_rate))
        return
    Console().print(_goodput_table(results, title=f"{trace_dir}: goodput of {scope}"))


def _goodput_table(results: list[Goodput], *, title: str) -> Table:
    """A column per scenario: goodput, GPU-hours lost (and by cause), what was caught."""
    from rich import box
    from rich.table import Table

    from predictor.goodput import CAUSES

    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("")
    for r in results:
        table.add_column(r.label, justify="right")
    base = results[0].lost
    table.add_row("goodput", *(f"{r.goodput:.2%}" for r in results))
    table.add_row("GPU-h lost", *(f"{r.lost:,.0f}" for r in results))
    table.add_row("  against no prediction", "", *(f"{r.lost - base:+,.0f}" for r in results[1:]))
    for cause in CAUSES:
        table.add_row(f"  {cause}", *(f"{r.lost_gpu_h[cause]:,.0f}" for r in results))
    table.add_row("failures drained ahead", *(f"{r.caught}/{r.failures}" for r in results))
    table.add_row("healthy nodes drained", *(str(r.false_drains) for r in results))
    return table


def register(app: typer.Typer) -> None:
    """Add ``generate-trace``, ``evaluate`` and ``goodput`` to ``app``."""
    app.command("generate-trace")(generate_trace_cmd)
    app.command("evaluate")(evaluate_cmd)
    app.command("goodput")(goodput_cmd)
