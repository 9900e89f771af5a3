"""The dashboards as JSON files: build every dashboard, write them, tell when files are stale.

The JSON follows the dashboard schema of Grafana 11.6 (``schemaVersion`` 41), which is the
schema of the pinned ``grafana-foundation-sdk==1769699379!11.6.0``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as models

from dashboards import fleet, gpu, network, predictions, training

SCHEMA_VERSION = 41
"""Grafana 11.6's dashboard schema version, the one the pinned SDK writes."""

DASHBOARDS: dict[str, Callable[[], models.Dashboard]] = {
    "fleet": fleet.build,
    "gpu": gpu.build,
    "training": training.build,
    "network": network.build,
    "predictions": predictions.build,
}
"""File stem -> builder of each dashboard, in the order a user reads them."""

DEFAULT_DIR = Path(__file__).resolve().parent


def to_json(dashboard: models.Dashboard) -> dict[str, Any]:
    """The dashboard as the plain JSON object Grafana stores."""
    data: dict[str, Any] = json.loads(json.dumps(dashboard, cls=JSONEncoder))
    if data.get("schemaVersion") != SCHEMA_VERSION:
        raise RuntimeError(
            f"grafana-foundation-sdk wrote schemaVersion {data.get('schemaVersion')}, expected "
            f"{SCHEMA_VERSION}: install grafana-foundation-sdk==1769699379!11.6.0"
        )
    return data


def render(data: dict[str, Any]) -> str:
    """The committed text of a dashboard: stable key order and indentation, newline at the end."""
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def build_all() -> dict[str, dict[str, Any]]:
    """File stem -> dashboard JSON, for every dashboard."""
    return {name: to_json(build()) for name, build in DASHBOARDS.items()}


def write_all(out_dir: Path = DEFAULT_DIR) -> list[Path]:
    """Write ``<name>.json`` for every dashboard into ``out_dir``; returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, data in build_all().items():
        path = out_dir / f"{name}.json"
        path.write_text(render(data), encoding="utf-8")
        paths.append(path)
    return paths


def stale(out_dir: Path = DEFAULT_DIR) -> list[str]:
    """Names of the dashboards whose file in ``out_dir`` is missing or differs from the code."""
    return [
        name
        for name, data in build_all().items()
        if not (out_dir / f"{name}.json").is_file()
        or (out_dir / f"{name}.json").read_text(encoding="utf-8") != render(data)
    ]


def load_all(directory: Path = DEFAULT_DIR) -> dict[str, dict[str, Any]]:
    """File stem -> JSON of the committed dashboards in ``directory``."""
    found: dict[str, dict[str, Any]] = {}
    for name in DASHBOARDS:
        path = directory / f"{name}.json"
        if not path.is_file():
            raise FileNotFoundError(
                f"{path} is missing: run `foreshock dashboards build` to write it"
            )
        found[name] = json.loads(path.read_text(encoding="utf-8"))
    return found
