"""Where a command will write, checked before its work starts: an export, a backtest or a fit
that ran for minutes must not end in a traceback because its output cannot be written."""

from __future__ import annotations

import os
from pathlib import Path

import typer


def output_dir(path: Path, option: str) -> Path:
    """``path``, a folder to write into, made now if need be; else a BadParameter naming
    ``option`` and what to do."""
    if path.exists() and not path.is_dir():
        raise typer.BadParameter(f"{path} is a file: give a folder", param_hint=option)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise typer.BadParameter(f"cannot create {path} ({exc.strerror}): give a folder you "
                                 "can write to", param_hint=option) from exc
    if not os.access(path, os.W_OK):
        raise typer.BadParameter(f"{path} is not writable: give a folder you can write to",
                                 param_hint=option)
    return path


def output_file(path: Path, option: str) -> Path:
    """``path``, a file to write, its folder made now if need be; else a BadParameter naming
    ``option`` and what to do."""
    if path.is_dir():
        raise typer.BadParameter(f"{path} is a folder: give a file name in it", param_hint=option)
    output_dir(path.parent, option)
    return path
