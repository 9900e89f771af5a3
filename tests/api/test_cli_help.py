"""`foreshock ... --help` reads as prose: each paragraph flows to the terminal's width, and
nothing is cut short."""
from __future__ import annotations

from itertools import pairwise

import typer
from typer.testing import CliRunner

from api import cli as api_cli


def _paths(command: object, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths = [path]
    if hasattr(command, "commands"):  # a group (typer's own click)
        for name, sub in command.commands.items():
            paths += _paths(sub, (*path, name))
    return paths


def _description(help_text: str) -> list[list[str]]:
    """The prose paragraphs between the usage line and the first panel, as lists of lines."""
    lines = help_text.splitlines()
    start = next(i for i, line in enumerate(lines) if "Usage:" in line) + 1
    end = next((i for i, line in enumerate(lines) if line.lstrip().startswith("╭")), len(lines))
    paragraphs: list[list[str]] = [[]]
    for line in lines[start:end]:
        if line.startswith("  ") and line.strip():
            continue  # a code block, shown as written
        if line.strip():
            paragraphs[-1].append(line.strip())
        elif paragraphs[-1]:
            paragraphs.append([])
    return [p for p in paragraphs if p]


def test_every_commands_help_flows_its_paragraphs_to_the_width() -> None:
    if "backtest" not in {c.name for c in api_cli.app.registered_commands}:
        api_cli._register_all()
    root = typer.main.get_command(api_cli.app)
    width = 80
    ragged, cut = [], []
    paths = _paths(root)
    assert len(paths) > 15, paths  # every package's commands, and the model/dashboards groups
    for path in paths:
        done = CliRunner().invoke(api_cli.app, [*path, "--help"], terminal_width=width,
                                  env={"COLUMNS": str(width)})
        assert done.exit_code == 0, (path, done.output)
        # A word wider than its column is cut short, and the user cannot read what it named.
        cut += [(" ".join(path), line) for line in done.output.splitlines() if "…" in line]
        for paragraph in _description(done.output):
            # A line that ends where the next word would still have fit is a docstring's own
            # line break shown as is (the text sits between one-column margins).
            ragged += [(" ".join(path), line) for line, after in pairwise(paragraph)
                       if len(line) + 1 + len(after.split()[0]) <= width - 2]
    assert not ragged, ragged
    assert not cut, cut
