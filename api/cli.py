"""The ``foreshock`` command line. Each package registers its own commands here."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any

import typer

app = typer.Typer(
    rich_markup_mode="markdown",
    name="foreshock",
    help="Foreshock: see GPU and network failures coming in training fleets, and act first.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)


@app.callback()
def _root() -> None:
    """Foreshock: see GPU and network failures coming in training fleets, and act first."""


@app.command()
def serve(
    db: Annotated[
        str | None,
        typer.Option(help="Store URL (sqlite:///path.db or postgresql+psycopg://...). "
                     "Default: FORESHOCK_DB_URL, else sqlite:///foreshock.db."),
    ] = None,
    host: Annotated[
        str | None, typer.Option(help="Address to bind. Default 127.0.0.1 (loopback only).")
    ] = None,
    port: Annotated[int | None, typer.Option(help="Port. Default 4318 (OTLP/HTTP).")] = None,
    env_file: Annotated[
        Path | None, typer.Option(help="A .env file of FORESHOCK_* settings to read first.")
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
    workers: Annotated[int, typer.Option(
        min=1, help="Worker processes (each runs ingest, queries and the background loops). "
        "More than 1 raises ingest throughput on multi-core machines.")] = 1,
) -> None:
    """Run the service: OTLP ingest at /v1/metrics, the query API, scoring, alerts, decisions."""
    import json
    import os

    import uvicorn
    from pydantic import ValidationError

    from api.app import create_app
    from api.settings import Settings, settings_error
    from collector.store import Store

    given = {"db_url": db, "host": host, "port": port}
    overrides: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
    try:
        settings = Settings(_env_file=env_file, **overrides)
    except ValidationError as exc:
        typer.echo(f"error: bad settings (the environment, --env-file, --db, --host or --port):"
                   f"\n{settings_error(exc)}", err=True)
        raise typer.Exit(2) from exc
    model = None
    if settings.model_path is not None:  # a user's model: refused now, not a scoring loop off
        from predictor.model import ModelFormatError
        from predictor.scorer import load_model

        try:
            model = load_model(settings.model_path)
        except ModelFormatError as exc:
            typer.echo(f"error: FORESHOCK_MODEL_PATH: {exc}", err=True)
            raise typer.Exit(2) from exc
    logging.basicConfig(level=log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if workers > 1:
        # Migrate once here, not racing in every worker; workers rebuild these settings from
        # the environment through the app factory.
        Store.open(settings.db_url).close()
        for name, value in settings.model_dump().items():
            if value is not None:
                secret = getattr(value, "get_secret_value", None)
                value = secret() if secret else value
                text = json.dumps(value) if isinstance(value, dict | list | tuple) else str(value)
                os.environ[f"FORESHOCK_{name.upper()}"] = text
        uvicorn.run("api.app:create_app", factory=True, workers=workers, host=settings.host,
                    port=settings.port, log_level=log_level, access_log=False)
        return
    uvicorn.run(
        create_app(settings, model=model),
        host=settings.host,
        port=settings.port,
        log_level=log_level,
        access_log=False,
    )


def _register_all() -> None:
    # Each package owns its commands; importing them here keeps `foreshock --help` complete.
    from collector import cli as collector_cli
    from dashboards import cli as dashboards_cli
    from predictor import cli as predictor_cli
    from trainer import cli as trainer_cli

    for module in (collector_cli, predictor_cli, dashboards_cli, trainer_cli):
        module.register(app)


def main() -> None:
    _register_all()
    app()
