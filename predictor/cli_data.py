"""Placeholder; its owner fills it in."""

import typer


def register(app: typer.Typer) -> None:
    """Add these commands to ``app``."""
