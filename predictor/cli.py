"""The predictor's commands: trace generation and evaluation, model fitting and backtests."""

import typer


def register(app: typer.Typer) -> None:
    """Add the predictor's commands to ``app``."""
    from predictor import cli_data, cli_model

    cli_data.register(app)
    cli_model.register(app)
