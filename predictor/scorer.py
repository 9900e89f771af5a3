"""The online scoring path shared by the service and backtests: features in, one risk row per
GPU, node and link out (risk, lead estimate, top signals), ready for the alert policy."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np
import pandas as pd

from predictor.features import Features
from predictor.model import RiskModel
from predictor.rules import RulesModel

RISK_COLUMNS: tuple[str, ...] = ("kind", "node", "gpu", "peer", "risk", "lead_s", "signals")
"""Columns of a risk frame. ``gpu`` is -1 and ``peer`` '' where they do not apply."""


class Model(Protocol):
    """What the scorer needs of a model: ``RiskModel`` and ``RulesModel`` both qualify."""

    version: str
    horizon_s: float

    def score(self, kind: str, x: pd.DataFrame, *, explain_above: float = ...,
              top: int = ...) -> tuple[np.ndarray, np.ndarray, list[tuple[str, ...]]]: ...


def load_model(spec: str | Path | None) -> Model:
    """``'rules'`` for the threshold baseline, a skops path, or None for the shipped model."""
    if spec is not None and str(spec) == "rules":
        return RulesModel()
    return RiskModel.load(spec)


class Scorer:
    """Scores every entity of a ``Features`` snapshot with one model."""

    def __init__(self, model: Model, *, explain_above: float = 0.2) -> None:
        self.model = model
        self.explain_above = explain_above

    @property
    def version(self) -> str:
        return self.model.version

    def score(self, feats: Features) -> pd.DataFrame:
        """A risk frame (``RISK_COLUMNS``) with one row per live entity."""
        # A node that has had a fatal XID has failed: it needs a repair, not a warning, and a
        # pre-failure alert raised now would only be noise after the fact, so its entities are
        # not scored at all. (The rules baseline keeps alarming on it, as DCGM does.)
        failed = {} if isinstance(self.model, RulesModel) else feats.failed
        parts = []
        for kind, frame in (("gpu", feats.gpu), ("node", feats.node), ("link", feats.link)):
            if not len(frame):
                continue
            nodes = frame["node"].to_numpy(dtype=object)
            gone = np.isin(nodes, list(failed)) if failed else np.zeros(len(frame), dtype=bool)
            risk, lead = np.zeros(len(frame)), np.full(len(frame), np.nan)
            signals: list[tuple[str, ...]] = [
                (f"failed: XID {failed[n][1]} {(feats.t - failed[n][0]) / 60:.0f} min ago",)
                if g else () for n, g in zip(nodes, gone, strict=True)]
            if not gone.all():
                live = np.flatnonzero(~gone)
                r, ld, sig = self.model.score(kind, frame.iloc[live],
                                              explain_above=self.explain_above)
                risk[live], lead[live] = r, ld
                for i, s in zip(live, sig, strict=True):
                    signals[i] = s
            part = pd.DataFrame({
                "kind": kind,
                "node": nodes,
                "gpu": frame["gpu"].to_numpy(dtype=np.int64) if kind == "gpu" else -1,
                "peer": frame["peer"].to_numpy(dtype=object) if kind == "link" else "",
                "risk": np.clip(risk, 0.0, 1.0),
                "lead_s": lead,
            })
            part["signals"] = pd.Series(signals, dtype=object).to_numpy()
            parts.append(part)
        if not parts:
            return pd.DataFrame({c: pd.Series(dtype=object) for c in RISK_COLUMNS})
        return pd.concat(parts, ignore_index=True)
