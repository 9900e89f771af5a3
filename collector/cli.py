"""``foreshock export`` and ``foreshock import``: the store to and from fleet-trace directories;
``foreshock from-prometheus``: a fleet trace from dcgm-exporter's history in Prometheus."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Annotated

import typer

from collector.outputs import output_dir

DbOption = Annotated[str, typer.Option(
    "--db", help="Store URL: sqlite:///path.db or postgresql+psycopg://user@host/db.")]
JobOption = Annotated[str | None, typer.Option(
    "--job", help="Only this job (export); the job to file the data under (import).")]


def export_trace(
    trace_dir: Annotated[Path, typer.Argument(help="Directory to write the fleet trace into.")],
    db: DbOption,
    start: Annotated[float | None, typer.Option(
        "--from", help="First timestamp to export (Unix seconds). Default: the oldest.")] = None,
    end: Annotated[float | None, typer.Option(
        "--to", help="Last timestamp to export (Unix seconds). Default: the newest.")] = None,
    job: JobOption = None,
) -> None:
    """Write the store's data as a fleet trace (fleet-trace/1)."""
    from rich.console import Console

    from collector.fleet_trace import write_trace
    from collector.store import Store
    from collector.trace_io import unlogged_jobs

    console = Console(stderr=True, soft_wrap=True)
    for given, option in ((start, "--from"), (end, "--to")):
        if given is not None and not math.isfinite(given):
            raise typer.BadParameter(f"{option} {given} is no time: give Unix seconds",
                                     param_hint=option)
    if start is not None and end is not None and end < start:
        raise typer.BadParameter(f"--to {end} is before --from {start}", param_hint="--to")
    made = not trace_dir.exists()
    output_dir(trace_dir, "TRACE_DIR")  # before the store: a bad folder costs no store read
    store = Store.open(db)
    try:
        if job is not None and job not in (jobs := store.jobs()):
            if made:
                trace_dir.rmdir()
            raise typer.BadParameter(f"the store has no data of job {job!r}; its jobs: "
                                     f"{', '.join(jobs) or 'none'}", param_hint="--job")
        with console.status(f"reading {db} ..."):
            trace = store.read_trace(job=job, start=start, end=end)
            unlogged = (unlogged_jobs(store, start=start, end=end)
                        if job is None and trace.events_exported else [])
        with console.status(f"writing {trace_dir} ..."):
            write_trace(trace_dir, trace)
    finally:
        store.close()
    events = f"{len(trace.events)} events" if trace.events_exported else \
        "no events.csv (the job was imported without an XID log)"
    console.print(f"exported {len(trace.gpu)} GPU samples, {len(trace.node)} node rows, "
                  f"{len(trace.links)} link probes, {events} "
                  f"({len(trace.meta.nodes)} nodes) to {trace_dir}")
    if unlogged:
        console.print(f"note: job(s) {', '.join(unlogged)} were imported without an XID log, so "
                      "events.csv claims their imported part raised none; export each alone "
                      "(--job) to keep that unknown", highlight=False)


def import_trace(
    trace_dir: Annotated[Path, typer.Argument(help="Fleet-trace directory to load.")],
    db: DbOption,
    job: JobOption = None,
) -> None:
    """Load a fleet trace into the store (failures.csv, the ground truth, is not loaded)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from collector.fleet_trace import TraceFormatError, read_trace
    from collector.metrics import GPU_COLUMNS
    from collector.store import Store

    console = Console(stderr=True, soft_wrap=True)
    try:
        trace = read_trace(trace_dir)
    except TraceFormatError as exc:
        console.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(2) from exc
    job = job or str(trace.meta.extra.get("job") or trace_dir.resolve().name)
    if not trace.events_exported:
        console.print(f"note: {trace_dir} has no events.csv (no XID log): job {job!r} is "
                      "marked so in the store, and the service scores it with XID counts "
                      "unknown, not zero (`foreshock export` writes it without events.csv).",
                      highlight=False)
    total = int(trace.gpu[[c for c in trace.gpu.columns if c in GPU_COLUMNS
                           or c.startswith("gpu.")]].notna().sum().sum())
    total += int(trace.node.iloc[:, 2:].notna().sum().sum()) if len(trace.node) else 0
    total += int(trace.links.iloc[:, 3:].notna().sum().sum()) if len(trace.links) else 0
    total += len(trace.events)
    store = Store.open(db)
    try:
        with Progress(TextColumn("[bold]import[/bold] {task.description}"), BarColumn(),
                      MofNCompleteColumn(), console=console) as progress:
            task = progress.add_task(f"{trace_dir} -> job {job}", total=total)
            written = store.write_trace(trace, job=job,
                                        progress=lambda n: progress.advance(task, n))
    except ValueError as exc:  # a name the store cannot hold, refused before any write
        console.print(f"[red]error:[/red] {trace_dir}: {exc}", highlight=False)
        raise typer.Exit(2) from exc
    finally:
        store.close()
    console.print(f"imported {written} points into job {job!r}")


def from_prometheus(
    trace_dir: Annotated[Path, typer.Argument(help="Directory to write the fleet trace into.")],
    url: Annotated[str, typer.Option(
        "--url", help="Prometheus that scraped dcgm-exporter.")] = "http://127.0.0.1:9090",
    start: Annotated[float | None, typer.Option(
        "--from", help="First time to read (Unix seconds). Default: two days before --to.")
    ] = None,
    end: Annotated[float | None, typer.Option(
        "--to", help="Last time to read (Unix seconds). Default: now.")] = None,
    scrape: Annotated[float, typer.Option(
        "--scrape-interval", help="Seconds between Prometheus's scrapes of dcgm-exporter. The "
        "trace holds the samples as scraped, whatever this says; it sizes the queries (10,000 "
        "scrapes a series each) and is the trace's interval if no GPU has two samples.")] = 30.0,
    selector: Annotated[str, typer.Option(
        "--selector", help="PromQL label matchers added to every field, e.g. "
        "'job=\"dcgm\",cluster=\"a\"'. Default: every dcgm-exporter series.")] = "",
    node_label: Annotated[str, typer.Option(
        "--node-label", help="Label that names the node (dcgm-exporter's Hostname; 'instance' "
        "without its port is read where it is absent).")] = "Hostname",
) -> None:
    """Write a fleet trace (fleet-trace/1) from the dcgm-exporter series a Prometheus keeps, to
    backtest Foreshock on your own fleet's history."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from collector import from_prometheus as fp
    from collector.fleet_trace import write_trace

    console = Console(stderr=True, soft_wrap=True)
    end = time.time() if end is None else end
    start = end - 2 * 86400.0 if start is None else start
    for given, option in ((start, "--from"), (end, "--to"), (scrape, "--scrape-interval")):
        if not math.isfinite(given):
            raise typer.BadParameter(f"{given} is no number", param_hint=option)
    if scrape <= 0:
        raise typer.BadParameter(f"{scrape:g} must be above 0 seconds",
                                 param_hint="--scrape-interval")
    if end <= start:
        raise typer.BadParameter(f"--to {end:.0f} is not after --from {start:.0f}",
                                 param_hint="--to")
    output_dir(trace_dir, "TRACE_DIR")
    source = fp.Source(url=url, start=start, end=end, scrape_s=scrape, selector=selector,
                       node_label=node_label)
    skipped: list[int] = []  # series left out, as read() reports them
    try:
        with Progress(TextColumn("[bold]from-prometheus[/bold] {task.description}"), BarColumn(),
                      MofNCompleteColumn(), console=console) as progress:
            task = progress.add_task(f"{url} -> {trace_dir}", total=fp.query_count(source))
            trace = fp.read(source, progress=lambda n: progress.advance(task, n),
                            skipped=skipped.append)
    except fp.PrometheusError as exc:
        console.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(2) from exc
    with console.status(f"writing {trace_dir} ..."):
        write_trace(trace_dir, trace)
    events = (f"{len(trace.events)} XID events" if trace.events_exported
              else f"no events.csv (no {fp.XID_FIELD} series: XID counts unknown)")
    console.print(f"wrote {trace_dir}: {len(trace.gpu):,} GPU samples of "
                  f"{len(trace.meta.nodes)} nodes, {events}", highlight=False)
    if skipped:
        console.print(f"note: {sum(skipped)} series without a {node_label!r} (or 'instance') and "
                      "a 'gpu' label were left out", highlight=False)
    unread = fp.unread(trace)
    if unread:
        console.print(
            f"note: no series of {', '.join(unread)}, so the trace has no "
            f"{', '.join(unread.values())}. dcgm-exporter's default counters leave ECC errors, "
            "NVLink CRC errors and clock-event reasons out, and without them the model warns of "
            "a failing GPU later or not at all (predictor/README.md, fleets that export less): "
            "list the fields in the counters CSV dcgm-exporter reads (its -f option) to export "
            "them from now on", highlight=False)


def register(app: typer.Typer) -> None:
    """Add this package's commands to ``app``."""
    app.command("export")(export_trace)
    app.command("import")(import_trace)
    app.command("from-prometheus")(from_prometheus)
