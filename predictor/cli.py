"""Commands of this package for the ``foreshock`` CLI (placeholder; its owner fills it in)."""

import typer


def register(app: typer.Typer) -> None:
    """Add this package's commands to ``app``."""
