"""``foreshock model fit|average|info`` and ``foreshock backtest``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer

from collector.outputs import output_file

model_app = typer.Typer(help="Fit and inspect risk models.", no_args_is_help=True)


@model_app.command("fit")
def fit(
    traces: Annotated[list[Path], typer.Argument(
        help="Fleet-trace directories, each with failures.csv (the labels).")],
    out: Annotated[Path, typer.Option(help="Where to write the skops model file.")],
    horizon_h: Annotated[float, typer.Option(
        help="Label horizon: a row is positive when its entity fails within this many hours.")
    ] = 6.0,
    every: Annotated[float, typer.Option(
        help="Replay period in trace seconds (one training row per entity per period).")] = 300.0,
    keep_healthy: Annotated[float, typer.Option(
        help="Share of healthy rows kept for training (the prior is corrected for it).")] = 0.08,
    seed: Annotated[int, typer.Option(help="Random seed of sampling and boosting.")] = 0,
    events_alone: Annotated[bool, typer.Option(
        help="Train every GPU row that shows a row remap or memory XID a second time with its "
             "error counters at their healthy baseline, so the model learns what remaps say "
             "when errors do not grow (predictor/ROUNDS.md, round 24).")] = False,
    lead_quantile: Annotated[float, typer.Option(
        help="Quantile of the time to failure that the lead estimate learns (0-1, exclusive): "
             "0.25 errs early, a failure coming sooner than estimated about one time in four; "
             "0.5 is the median, too long as often as too short.")] = 0.25,
) -> None:
    """Train the risk model on labelled fleet traces and save it with skops."""
    from rich.console import Console

    from predictor.dataset import LabelConfig
    from predictor.model import FitConfig
    from predictor.training import fit_traces

    console = Console(stderr=True, soft_wrap=True)
    output_file(out, "'--out'")
    try:
        config = FitConfig(seed=seed, events_alone=events_alone, lead_quantile=lead_quantile)
    except ValueError as exc:  # the one option FitConfig checks
        raise typer.BadParameter(str(exc), param_hint="'--lead-quantile'") from exc
    try:
        labels = LabelConfig(horizon_s=horizon_h * 3600, keep_healthy=keep_healthy, every_s=every)
        with console.status("replaying traces") as status:
            model = fit_traces(traces, labels=labels, config=config,
                               progress=lambda s: status.update(f"replayed {s}"))
    except ValueError as exc:  # TraceFormatError is a ValueError and names file and column
        raise typer.BadParameter(str(exc)) from exc
    model.save(out)
    console.print(f"wrote {out} (model {model.version}; kinds {', '.join(model.kinds)})")


@model_app.command("average")
def average(
    models: Annotated[list[Path], typer.Argument(
        help="Two or more skops model files fitted with the same features and horizon (say, "
             "on different fleets or with different --seed).")],
    out: Annotated[Path, typer.Option(help="Where to write the averaged skops model file.")],
) -> None:
    """Combine models into one whose risk is the mean of theirs.

    Members fitted on different fleets each raise some false alarms of their own; the average
    keeps what they agree on. The shipped model is such an average of three
    (``python -m predictor.train_default``; predictor/ROUNDS.md has what averaging did)."""
    from predictor.model import ModelFormatError, RiskModel

    output_file(out, "'--out'")
    try:
        combined = RiskModel.average([RiskModel.load(m) for m in models])
    except (ModelFormatError, ValueError) as exc:
        raise typer.BadParameter(str(exc)) from exc
    combined.save(out)
    typer.echo(f"wrote {out} (model {combined.version}; {len(models)} members)")


@model_app.command("info")
def info(model: Annotated[Path, typer.Argument(help="A skops model file.")]) -> None:
    """Print a model's version, horizon, features and how it estimates the lead."""
    from predictor.model import ModelFormatError, RiskModel

    try:
        m = RiskModel.load(model)
    except ModelFormatError as exc:
        raise typer.BadParameter(str(exc)) from exc
    typer.echo(f"version {m.version}; horizon {m.horizon_s / 3600:g} h")
    for kind, km in m.kinds.items():
        averaged = f", average of {len(km.estimators)}" if len(km.estimators) > 1 else ""
        quantiles = " and ".join(f"{q:g}" for q in km.lead_quantiles)
        lead = (f"lead from {len(km.lead_estimators)} regressor(s) of the {quantiles} quantile"
                if km.lead_estimators else "lead from the risk-bin table")
        typer.echo(f"{kind}: {len(km.features)} features{averaged}, {lead}: "
                   f"{', '.join(km.features)}")


def backtest(
    trace: Annotated[Path, typer.Argument(help="Fleet-trace directory to replay.")],
    alerts_out: Annotated[Path, typer.Option(help="Where to write alerts.csv.")],
    model: Annotated[str | None, typer.Option(
        help="skops model file, or 'rules' for the DCGM-style threshold baseline. "
             "Default: the model shipped with Foreshock.")] = None,
    plot: Annotated[Path | None, typer.Option(
        help="Also draw risk timelines to this PNG: a lane per node (those with failures or "
             "alerts first, up to 24), its risk as colour; where failures.csv exists, each "
             "failure caught or missed with its precursor, and each alert episode green if a "
             "failure followed, red if none did.")
    ] = None,
    every: Annotated[float, typer.Option(
        help="Scoring period in trace seconds (> 0). The service scores every 30 s; 60 scores "
             "five times as many ticks as 300 and, on the benchmark fleets, reads within the "
             "spread of where 300-s ticks fall (predictor/README.md).")] = 300.0,
    fire_at: Annotated[float | None, typer.Option(
        min=0.0, max=1.0,
        help="Risk at or above which a node becomes an alert candidate. Default: the "
             "model's own alert policy (predictor/hysteresis.py). Higher: fewer false alerts, "
             "fewer catches.")] = None,
    persist: Annotated[float | None, typer.Option(
        min=0.0,
        help="Seconds a candidate's risk must hold before its alert opens. Default: the "
             "model's own alert policy.")
    ] = None,
) -> None:
    """Replay a trace through the online scoring path and write the alerts it would raise.

    failures.csv is never read while predicting (only --plot reads it, afterwards). Try
    --fire-at / --persist on your own history before changing the service's settings of the
    same meaning, FORESHOCK_ALERT_FIRE_AT and FORESHOCK_ALERT_PERSIST_S: `foreshock evaluate`
    shows what each costs in catches and false alerts.
    """
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    from collector.fleet_trace import read_trace
    from predictor import backtest as bt
    from predictor.model import ModelFormatError
    from predictor.scorer import load_model
    from predictor.signals_absent import missing

    console = Console(stderr=True, soft_wrap=True)
    if not 0 < every < math.inf:
        raise typer.BadParameter(f"the scoring period must be > 0 seconds and finite, got "
                                 f"{every}", param_hint="'--every'")
    output_file(alerts_out, "'--alerts-out'")
    if plot is not None:
        output_file(plot, "'--plot'")
    try:
        data = read_trace(trace)
        scorer_model = load_model(model)
    except (ValueError, ModelFormatError) as exc:
        raise typer.BadParameter(str(exc)) from exc
    for note in missing(data):
        console.print(f"note: {trace}: {note} (predictor/README.md: fleets that export less)")
    with Progress(TextColumn("backtest"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeRemainingColumn(), console=console, transient=True) as bar:
        task = bar.add_task("ticks", total=None)
        policy = bt.policy_for(scorer_model).overridden(fire_at=fire_at, persist_s=persist)
        result = bt.run(data, scorer_model, every_s=every, policy=policy,
                        progress=lambda i, n: bar.update(task, completed=i, total=n))
    bt.write_alerts(result.alerts, alerts_out)
    nodes = result.alerts["node"].nunique()
    console.print(f"wrote {alerts_out}: {len(result.alerts)} alert rows on {nodes} nodes "
                  f"over {result.ticks} ticks (model {result.model_version})")
    if plot is not None:
        from predictor.plots import plot_backtest

        plot_backtest(result, trace, plot)
        console.print(f"wrote {plot}")


def register(app: typer.Typer) -> None:
    """Add ``model`` (fit, info) and ``backtest`` to ``app``."""
    app.add_typer(model_app, name="model")
    app.command("backtest")(backtest)
