"""Commands of the trainer package for the ``foreshock`` CLI: ``foreshock demo``."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer


def demo(
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    nodes: Annotated[int, typer.Option(min=2, help="Simulated nodes (torchrun agents).")] = 3,
    fail_after: Annotated[float, typer.Option(
        min=30, help="Seconds after launch at which the injected GPU failure strikes.")] = 95.0,
    develop: Annotated[float, typer.Option(
        min=10, help="Seconds over which the degradation develops before it fails.")] = 75.0,
    kind: Annotated[str, typer.Option(
        help="Degradation of the simulated GPU: ecc, thermal, nvlink, pcie or power.")] = "ecc",
    timeout: Annotated[float, typer.Option(min=60, help="Give up after this many seconds.")]
    = 175.0,
    keep_files: Annotated[Path | None, typer.Option(
        help="Keep the run's store, logs and checkpoints in this directory (default: a "
        "temporary directory, deleted at the end).")] = None,
) -> None:
    """Run the whole loop on this machine: predict a GPU failure, checkpoint, drain, resume.

    The demo's service ignores the shell's FORESHOCK_* settings (Alertmanager, drain command,
    tokens, alert and drain policy), so it never reaches a real scheduler or pager; only
    FORESHOCK_MODEL_PATH is honoured, to show another model on the same scenario.
    """
    from rich.console import Console

    from trainer.demo import Demo, DemoConfig
    from trainer.demo_report import Mark, render

    try:
        config = DemoConfig(nodes=nodes, fail_after_s=fail_after, develop_s=develop, kind=kind,
                            timeout_s=timeout, keep_dir=keep_files)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    err = Console(stderr=True)
    started = time.time()
    with err.status("starting the service…") as status:

        def on_mark(m: Mark) -> None:
            err.print(f"[dim]t+{m.t - started:6.1f} s[/dim]  [bold]{m.what}[/bold]  {m.detail}")

        def on_status(line: str) -> None:
            status.update(line)

        summary = Demo(config, on_mark=on_mark, on_status=on_status).run()
    if as_json:
        typer.echo(json.dumps(summary.to_json(), indent=2))
    else:
        render(summary, Console())
    raise typer.Exit(0 if summary.ok else 1)


def rdzv_store(
    host: Annotated[str, typer.Option(
        help="Address to bind; loopback by default, give one the other nodes can reach.")]
    = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 29400,
) -> None:
    """Host torchrun's c10d rendezvous store apart from the agents (they use is_host=false).

    An agent that hosts the store takes the whole job down when its node is drained or fails.
    Point every agent at it, and set TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 on every agent:

        torchrun --rdzv-backend=c10d --rdzv-endpoint=HOST:PORT \\
        --rdzv-conf=is_host=false,last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=3
    """
    from datetime import timedelta

    import torch.distributed as dist

    store = dist.TCPStore(host, port, is_master=True, multi_tenant=True,
                          wait_for_workers=False, timeout=timedelta(seconds=60))
    typer.echo(f"rendezvous store listening on {host}:{port}; Ctrl-C to stop")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        del store


def register(app: typer.Typer) -> None:
    """Add this package's commands to ``app``."""
    app.command("demo")(demo)
    app.command("rdzv-store")(rdzv_store)
