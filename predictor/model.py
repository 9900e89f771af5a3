"""The learned risk model: gradient-boosted trees with monotone priors, calibrated
probabilities, a lead-time table, top-signal attribution, and skops files (never pickle).

One classifier per entity kind (GPU, node, link). Each feature's monotone prior (see
``feature_frames``) is enforced, so on fleets unlike the training data the model can only
extrapolate in the direction domain knowledge allows.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
import sklearn
import skops.io as sio
from sklearn.calibration import CalibratedClassifierCV
from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
from sklearn.model_selection import StratifiedKFold
from threadpoolctl import ThreadpoolController

from predictor.feature_frames import (
    ERROR_GROWTH,
    FEATURES_BY_KIND,
    MEMORY_EVENTS,
    UNHOOKED,
)
from predictor.signals import explain

FORMAT = "foreshock-model/2"
READABLE_FORMATS = ("foreshock-model/1", FORMAT)
"""/1 held one classifier per kind; /2 holds one or more (an average), and reads /1 files."""
LEAD_EDGES = np.array([0.0, 0.05, 0.1, 0.2, 0.35, 0.5, 0.7, 0.85, 1.0001])
LEARNED_LEAD_ABOVE = 0.2
"""Risk from which a model with lead regressors estimates the lead with them (below, where no
lane of the alert policy fires, the risk bin's median serves and costs nothing)."""
DEFAULT_MODEL_PATH = Path(__file__).with_name("models") / "default.skops"
SERIAL_BELOW_ROWS = 512
"""Batches smaller than this are scored on one OpenMP thread. Boosted trees open a parallel
region per tree, and a thread descheduled at a barrier stalls the rest: beside one busy process
on two cores, every OpenMP thread took 6.4x as long as one thread for 32 GPUs and 3.8x for 256
(beside two, 10-11x; a 6-h, 8-node backtest took 83 s there, 12 s with this limit, 8.5 s on an
idle host). Idle, a small batch gains nothing from threads (32 rows 4.8 vs 4.3 ms, 256 rows 7.5 vs
7.9) and a large one does (1,024 rows 13 vs 18 ms, 16,384 rows 123 vs 228), so larger batches
keep every thread; on a host shared with other busy work, ``OMP_NUM_THREADS=1`` is the better
setting at every size (16,384 rows beside one busy process: 220 ms on one thread, 598 on two).
``benchmarks/small_batches.py`` prints these side by side."""


@cache
def _openmp() -> ThreadpoolController:
    return ThreadpoolController()  # inspects the loaded libraries once (milliseconds)


def _threads_for(rows: int) -> AbstractContextManager[object]:
    if rows >= SERIAL_BELOW_ROWS:
        return nullcontext()
    return _openmp().limit(limits=1, user_api="openmp")


class ModelFormatError(ValueError):
    """A model file is missing, unreadable or not a Foreshock model."""


@dataclass(kw_only=True)
class KindModel:
    """The classifier(s) of one entity kind and what they need at scoring time. Several
    classifiers (members fitted on different fleets) are averaged: risk is the mean of their
    prior-corrected probabilities."""

    estimators: list[object]
    features: list[str]
    baseline: np.ndarray
    """Healthy medians of each feature: the reference for top-signal attribution."""
    lead_s: np.ndarray
    """Median time to failure of positive training rows per risk bin (``LEAD_EDGES``)."""
    keep_healthy: list[float]
    """Share of healthy rows each classifier was fitted on: the prior correction undoes it."""
    lead_estimators: list[object] = field(default_factory=list)
    """Regressors of a quantile of log time to failure (``lead_quantiles``: 0.25 since round 27,
    0.5 before) on the failing training rows, one per member (empty in models fitted before them:
    ``lead_s`` then estimates alone)."""

    def __post_init__(self) -> None:
        if not self.estimators or len(self.estimators) != len(self.keep_healthy):
            raise ValueError(f"{len(self.estimators)} estimators for "
                             f"{len(self.keep_healthy)} keep_healthy shares")

    def risk(self, x: pd.DataFrame) -> np.ndarray:
        if not len(x):
            return np.zeros(0)
        arr = x.reindex(columns=self.features).to_numpy(dtype=np.float64)
        total = np.zeros(len(arr))
        with _threads_for(len(arr)):
            for estimator, keep in zip(self.estimators, self.keep_healthy, strict=True):
                p = np.asarray(estimator.predict_proba(arr)[:, 1])  # type: ignore[attr-defined]
                total += prior_corrected(p, keep)
        return total / len(self.estimators)

    @property
    def lead_quantiles(self) -> tuple[float, ...]:
        """The quantiles of the time to failure that its regressors estimate, one each where
        members differ (0.5 for round 23's median loss); empty without regressors."""
        return tuple(sorted({
            float(e.quantile) if e.loss == "quantile" else 0.5  # type: ignore[attr-defined]
            for e in self.lead_estimators}))

    def lead(self, risk: np.ndarray, x: pd.DataFrame | None = None, *,
             above: float = LEARNED_LEAD_ABOVE, horizon_s: float = 6 * 3600.0) -> np.ndarray:
        """Estimated seconds to failure: the risk bin's median (``lead_s``), and where the risk
        is at least ``above`` and ``x`` is given, the members' regressors (geometric mean of
        their estimates, within 1 minute and ``horizon_s``)."""
        idx = np.clip(np.searchsorted(LEAD_EDGES, risk, side="right") - 1, 0, len(self.lead_s) - 1)
        out = self.lead_s[idx].copy()
        rows = np.flatnonzero(risk >= above)
        if x is None or not self.lead_estimators or not len(rows):
            return out
        arr = x.iloc[rows].reindex(columns=self.features).to_numpy(dtype=np.float64)
        with _threads_for(len(arr)):
            log_ttf = np.mean([np.asarray(e.predict(arr))  # type: ignore[attr-defined]
                               for e in self.lead_estimators], axis=0)
        out[rows] = np.clip(np.exp(log_ttf), 60.0, horizon_s)
        return out


def prior_corrected(p: np.ndarray, keep_healthy: float) -> np.ndarray:
    """Probabilities calibrated on a sample keeping ``keep_healthy`` of negatives, mapped back
    to the full population (odds scale by ``keep_healthy``)."""
    num = p * keep_healthy
    return num / np.maximum(num + (1.0 - p), 1e-12)


@dataclass(kw_only=True)
class RiskModel:
    """Per-kind calibrated classifiers plus a version string recorded with every score."""

    version: str
    kinds: dict[str, KindModel]
    horizon_s: float

    def score(self, kind: str, x: pd.DataFrame, *, explain_above: float = 0.2,
              top: int = 3) -> tuple[np.ndarray, np.ndarray, list[tuple[str, ...]]]:
        """(risk, lead estimate in seconds, top signals) of each row of ``x``. Node rows of a
        fleet that exports no compute times (no training hook) are scored by the ``UNHOOKED``
        model where this model has one."""
        if kind == "node" and UNHOOKED in self.kinds and (
                "compute_z" not in x or x["compute_z"].isna().all()):
            kind = UNHOOKED
        km = self.kinds.get(kind)
        if km is None or not len(x):
            return np.zeros(len(x)), np.full(len(x), np.nan), [() for _ in range(len(x))]
        risk = km.risk(x)
        signals = explain(km.risk, x.reindex(columns=km.features), risk, km.baseline,
                          above=explain_above, top=top,
                          direction=np.array([FEATURES_BY_KIND[kind].get(f, 0)
                                              for f in km.features], dtype=np.float64))
        return risk, km.lead(risk, x, horizon_s=self.horizon_s), signals

    def save(self, path: Path | str) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        blob = {
            "format": FORMAT, "version": self.version, "horizon_s": self.horizon_s,
            "kinds": {k: {"estimators": list(m.estimators), "features": list(m.features),
                          "baseline": m.baseline.tolist(), "lead_s": m.lead_s.tolist(),
                          "keep_healthy": list(m.keep_healthy),
                          "lead_estimators": list(m.lead_estimators)}
                      for k, m in self.kinds.items()},
        }
        sio.dump(blob, path, compression=zipfile.ZIP_DEFLATED, compresslevel=9)

    @classmethod
    def load(cls, path: Path | str | None = None) -> RiskModel:
        """Load a skops model file; ``None`` loads the model shipped with Foreshock."""
        path = Path(path) if path is not None else DEFAULT_MODEL_PATH
        if not path.is_file():
            raise ModelFormatError(f"{path}: model file not found")
        try:
            untrusted = sio.get_untrusted_types(file=path)
            trusted = [t for t in untrusted if t.startswith(("sklearn.", "numpy.", "builtins."))]
            blob = sio.load(path, trusted=trusted)
        except Exception as exc:  # skops raises many kinds on a corrupt or foreign file
            raise ModelFormatError(f"{path}: not a readable skops model ({exc})") from exc
        if not isinstance(blob, dict) or blob.get("format") not in READABLE_FORMATS:
            raise ModelFormatError(f"{path}: not a Foreshock model (expected format "
                                   f"{' or '.join(READABLE_FORMATS)})")
        kinds = {}
        for k, v in blob["kinds"].items():
            single = "estimator" in v  # foreshock-model/1
            kinds[k] = KindModel(
                estimators=[v["estimator"]] if single else list(v["estimators"]),
                features=list(v["features"]),
                baseline=np.asarray(v["baseline"], dtype=np.float64),
                lead_s=np.asarray(v["lead_s"], dtype=np.float64),
                keep_healthy=[float(v["keep_healthy"])] if single else
                [float(h) for h in v["keep_healthy"]],
                lead_estimators=list(v.get("lead_estimators", [])))
        return cls(version=str(blob["version"]), kinds=kinds, horizon_s=float(blob["horizon_s"]))

    @classmethod
    def average(cls, models: list[RiskModel]) -> RiskModel:
        """One model whose risk is the mean of ``models``' risks (members fitted on different
        fleets, same features and horizon). Its healthy baseline is the members' median, its
        lead table their mean, its lead regressors theirs where every member has them; its
        version names the members."""
        if len(models) < 2:
            raise ValueError(f"averaging needs two models or more, got {len(models)}")
        first = models[0]
        for m in models[1:]:
            if m.horizon_s != first.horizon_s or set(m.kinds) != set(first.kinds):
                raise ValueError(f"model {m.version} (horizon {m.horizon_s:.0f} s, kinds "
                                 f"{sorted(m.kinds)}) cannot be averaged with {first.version} "
                                 f"(horizon {first.horizon_s:.0f} s, kinds {sorted(first.kinds)})")
            for k, km in m.kinds.items():
                if km.features != first.kinds[k].features:
                    raise ValueError(f"model {m.version} scores {k} on other features than "
                                     f"{first.version}: refit both with this Foreshock")
        kinds = {k: KindModel(
            estimators=[e for m in models for e in m.kinds[k].estimators],
            features=list(km.features),
            baseline=np.median([m.kinds[k].baseline for m in models], axis=0),
            lead_s=np.mean([m.kinds[k].lead_s for m in models], axis=0),
            keep_healthy=[h for m in models for h in m.kinds[k].keep_healthy],
            lead_estimators=[e for m in models for e in m.kinds[k].lead_estimators]
            if all(m.kinds[k].lead_estimators for m in models) else [])
            for k, km in first.kinds.items()}
        return cls(version=version_of(kinds, horizon_s=first.horizon_s,
                                      sources=[m.version for m in models]),
                   kinds=kinds, horizon_s=first.horizon_s)


@dataclass(frozen=True, kw_only=True)
class FitConfig:
    """Hyper-parameters of ``fit``."""

    max_iter: int = 150
    """Boosting rounds."""
    learning_rate: float = 0.08
    """Shrinkage."""
    max_leaf_nodes: int = 15
    """Leaves per tree."""
    min_samples_leaf: int = 40
    """Smallest leaf; large values keep rare generator quirks out of the trees."""
    seed: int = 0
    """Random seed."""
    events_alone: bool = False
    """Teach the GPU model remaps and memory XIDs on their own: every GPU row that shows one is
    trained twice, once as it is and once with its error counters set to their healthy baseline
    (same label). Where memory trouble comes with a growing count of corrected errors, trees
    learn the growth and never need the remaps; this copy makes them learn what the remaps say
    when the count is flat or was already high before the trace began. Off by default and in the
    shipped model: measured in round 24 (predictor/ROUNDS.md), it caught 4 more of the third
    generator's failures but raised 10 false alarms on GPUs repaired after a memory failure,
    whose own XIDs stay in the 6-h windows once the failed node's 1-h hold ends."""
    lead_quantile: float = 0.25
    """Quantile of the time to failure that the lead regressors estimate: at 0.25 a failure
    comes sooner than estimated about one time in four on the training fleets. Sooner is the
    costly error (a checkpoint put off to fit the estimate comes too late); round 23's
    regressors estimated the median (0.5), and half the caught failures came sooner."""

    def __post_init__(self) -> None:
        if self.max_iter < 1:
            raise ValueError(f"max_iter={self.max_iter} must be >= 1")
        if not 0.0 < self.lead_quantile < 1.0:
            raise ValueError(f"lead_quantile={self.lead_quantile} must be between 0 and 1")


def fit_kind(kind: str, x: pd.DataFrame, y: np.ndarray, ttf_s: np.ndarray, *,
             keep_healthy: float, config: FitConfig) -> KindModel | None:
    """Fit one kind on rows keeping ``keep_healthy`` of the negatives; None when the rows hold
    no positive (or no negative) example.

    Weighting the kept negatives back up would make binning ~10x slower (weighted
    percentiles); fitting on the sample and correcting the prior afterwards is equivalent.
    """
    features = list(FEATURES_BY_KIND[kind])
    if y.sum() < 3 or (y == 0).sum() < 3:
        return None
    arr = np.array(x[features].to_numpy(dtype=np.float64))
    # The calibration folds (what an integer cv gives CalibratedClassifierCV: unshuffled
    # StratifiedKFold), made once and handed to it below. A column all NaN in the training rows
    # of one of them breaks binning: one no training trace had (say HBM temperature, NaN in every
    # fold) or one only a few traces have. Neither can teach; zero it.
    folds = StratifiedKFold(int(min(3, y.sum())))
    for train, _ in folds.split(arr, y):
        arr[:, np.isnan(arr[train]).all(axis=0)] = 0.0
    healthy = arr[y == 0]
    baseline = np.nan_to_num(np.nanmedian(healthy, axis=0) if len(healthy) else np.zeros(
        len(features)), nan=0.0)
    fit_arr, fit_y = (_with_events_alone(arr, y, features, baseline)
                      if kind == "gpu" and config.events_alone else (arr, y))
    base = HistGradientBoostingClassifier(
        max_iter=config.max_iter, learning_rate=config.learning_rate,
        max_leaf_nodes=config.max_leaf_nodes, min_samples_leaf=config.min_samples_leaf,
        l2_regularization=1.0, monotonic_cst=[FEATURES_BY_KIND[kind][f] for f in features],
        random_state=config.seed,
    )
    clf = CalibratedClassifierCV(base, method="sigmoid", cv=folds, ensemble=False)
    clf.fit(fit_arr, fit_y)
    p = prior_corrected(clf.predict_proba(arr)[:, 1], keep_healthy)
    lead = np.full(len(LEAD_EDGES) - 1, np.nan)
    for i in range(len(lead)):
        sel = (y == 1) & (p >= LEAD_EDGES[i]) & (p < LEAD_EDGES[i + 1])
        if sel.sum() >= 5:
            lead[i] = float(np.median(ttf_s[sel]))
    fill = float(np.nanmedian(ttf_s[y == 1])) if (y == 1).any() else 3600.0
    lead = pd.Series(lead).ffill().bfill().fillna(fill).to_numpy()
    return KindModel(estimators=[clf], features=features, baseline=baseline, lead_s=lead,
                     keep_healthy=[keep_healthy],
                     lead_estimators=_fit_lead(kind, arr[y == 1], ttf_s[y == 1], config))


def _with_events_alone(arr: np.ndarray, y: np.ndarray, features: list[str],
                       baseline: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``arr`` and ``y`` with a copy of every row that shows a remap or memory XID, its error
    counters at ``baseline``; each copy sits right after its row, so that the calibration's
    unshuffled folds split rows and copies alike."""
    events = [features.index(f) for f in MEMORY_EVENTS]
    errors = [features.index(f) for f in ERROR_GROWTH]
    src = np.flatnonzero((np.nan_to_num(arr[:, events]) > baseline[events]).any(axis=1))
    copies = arr[src].copy()
    copies[:, errors] = baseline[errors]
    order = np.argsort(np.concatenate([np.arange(len(arr)), src]), kind="stable")
    return np.concatenate([arr, copies])[order], np.concatenate([y, y[src]])[order]


def _fit_lead(kind: str, arr: np.ndarray, ttf_s: np.ndarray, config: FitConfig) -> list[object]:
    """A regressor of the ``config.lead_quantile`` quantile of log seconds to failure on the
    failing rows, constrained the other way round from the risk: a feature on its bad side
    never lengthens the estimate. Empty when there are too few rows to learn from."""
    if len(arr) < 5 * config.min_samples_leaf:
        return []
    reg = HistGradientBoostingRegressor(
        loss="quantile", quantile=config.lead_quantile, max_iter=config.max_iter,
        learning_rate=config.learning_rate,
        max_leaf_nodes=config.max_leaf_nodes, min_samples_leaf=config.min_samples_leaf,
        l2_regularization=1.0, random_state=config.seed,
        monotonic_cst=[-FEATURES_BY_KIND[kind][f] for f in FEATURES_BY_KIND[kind]])
    reg.fit(arr, np.log(np.maximum(ttf_s, 60.0)))
    return [reg]


def version_of(kinds: dict[str, KindModel], *, horizon_s: float, sources: list[str]) -> str:
    """``hgb-<sklearn version>-<hash>``, with ``-avg<n>`` for an average of n classifiers per
    kind. The hash covers the sources, features and lead tables and what the classifiers compute
    (``_fingerprint``): two fits that differ only in their trees (another seed, other
    hyper-parameters, a feature computed another way under the same name) get two versions."""
    members = max(len(m.estimators) for m in kinds.values())
    digest = hashlib.sha256(json.dumps(
        {"sources": sources, "horizon": horizon_s,
         "features": {k: m.features for k, m in kinds.items()},
         "lead": {k: m.lead_s.round(1).tolist() for k, m in kinds.items()},
         "risk": {k: _fingerprint(m) for k, m in kinds.items()},
         # Only for models that have lead regressors, so older versions hash as before.
         **({"lead_fit": {k: _fingerprint(m, lead=True) for k, m in kinds.items()}}
            if any(m.lead_estimators for m in kinds.values()) else {})},
        sort_keys=True).encode()).hexdigest()[:10]
    return f"hgb-{sklearn.__version__}-{digest}" + (f"-avg{members}" if members > 1 else "")


def _fingerprint(km: KindModel, *, lead: bool = False) -> list[float]:
    """The risk (or, with ``lead``, the lead regressors' estimate) on 33 fixed inputs spread
    around the healthy baseline (each feature moved by its own multiple of -4..4): two fits that
    differ in their trees differ here unless they agree on all 33 to six decimals."""
    steps = np.linspace(-4.0, 4.0, 33)
    spread = np.cos(np.arange(len(km.features)) * 1.7) * (1.0 + np.abs(km.baseline))
    grid = pd.DataFrame(km.baseline[None, :] + steps[:, None] * spread[None, :],
                        columns=km.features)
    if lead:
        return np.round(km.lead(np.ones(len(grid)), grid) / 60.0, 6).tolist()
    return np.round(km.risk(grid), 6).tolist()
