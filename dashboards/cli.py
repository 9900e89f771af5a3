"""``foreshock dashboards build`` and ``foreshock dashboards provision``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

dashboards_app = typer.Typer(
    name="dashboards",
    help="Grafana dashboards as code: regenerate the JSON, or upsert them into a Grafana.",
    no_args_is_help=True,
)


@dashboards_app.command("build")
def build(
    out: Annotated[
        Path | None,
        typer.Option(help="Directory for the JSON files. Default: the dashboards package "
                     "(the committed files)."),
    ] = None,
) -> None:
    """Regenerate every dashboard's JSON from the code."""
    _require_extra()
    from collector.outputs import output_dir
    from dashboards.export import DEFAULT_DIR, write_all

    for path in write_all(output_dir(out, "'--out'") if out is not None else DEFAULT_DIR):
        typer.echo(f"wrote {path}")


@dashboards_app.command("provision")
def provision(
    grafana_url: Annotated[
        str, typer.Option(help="Grafana's base URL, e.g. http://grafana:3000.")
    ],
    token: Annotated[
        str, typer.Option(help="A Grafana service-account token with the Editor or Admin role.",
                          envvar="GRAFANA_TOKEN")
    ],
    folder: Annotated[str, typer.Option(help="Folder title for the dashboards.")] = "Foreshock",
    db_url: Annotated[
        str | None,
        typer.Option(help="PostgreSQL URL of the store as Grafana reaches it. "
                     "Default: FORESHOCK_DB_URL."),
    ] = None,
) -> None:
    """Create or update the store's data source, the folder and every dashboard (idempotent)."""
    _require_extra()
    from dashboards.provision import ProvisionError
    from dashboards.provision import provision as run

    if db_url is None:
        from api.settings import Settings

        db_url = Settings().db_url
    try:
        result = run(grafana_url, token, db_url=db_url, folder=folder)
    except (ValueError, ProvisionError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(code=1) from error
    typer.echo(f"data source: {result.datasource}; folder: {result.folder}")
    for uid, url in result.dashboards.items():
        typer.echo(f"dashboard {uid}: {grafana_url.rstrip('/')}{url}")


def _require_extra() -> None:
    """Fail with the install command when the ``dashboards`` extra is missing."""
    try:
        import grafana_client  # noqa: F401
        import grafana_foundation_sdk  # noqa: F401
    except ImportError as error:
        typer.echo(f"error: {error.name} is not installed: pip install 'foreshock[dashboards]'",
                   err=True)
        raise typer.Exit(code=1) from error


def register(app: typer.Typer) -> None:
    """Add the ``dashboards`` command group to ``app``."""
    app.add_typer(dashboards_app)
