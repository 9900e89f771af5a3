"""Placeholder background loop; its owner fills it in."""

from fastapi import FastAPI


async def run(app: FastAPI) -> None:
    """Runs for the service's lifetime."""
