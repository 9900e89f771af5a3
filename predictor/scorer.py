"""The online scoring path shared by the service and backtests: features in, one risk row per
GPU, node and link out (risk, lead estimate, top signals), ready for the alert policy."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

import numpy as np
import pandas as pd

from predictor.feature_frames import FEATURES_BY_KIND, LINK_FEATURES, NODE_FEATURES, dead_zone
from predictor.features import Features
from predictor.model import LEARNED_LEAD_ABOVE, RiskModel
from predictor.rules import RulesModel

RISK_COLUMNS: tuple[str, ...] = ("kind", "node", "gpu", "peer", "risk", "lead_s", "signals")
"""Columns of a risk frame. ``gpu`` is -1 and ``peer`` '' where they do not apply."""


REMAP_RISK = 0.95
"""Risk of a GPU whose HBM has remapped a row twice or more within the hour (``Features.remaps``),
where the model reads less. A single remap is routine; a second this soon was followed by the
GPU's failure in 68 of 68 cases on the fresh fleets and suites of all three generators (held out
from training), and every generator keeps benign remaps single. The models, trained where such
remaps come amid corrected-error growth, read it at 0.01-0.56 where the errors are few: the third
generator's (predictor/ROUNDS.md, round 26). Above the alert policy's ``fire_now_at``: it fires at
once. The rules baseline keeps its own reading of memory XIDs."""
REMAP_LEAD_S = 720.0
"""Lead estimate at ``REMAP_RISK`` where the model reads too little to estimate one of its own
(below ``LEARNED_LEAD_ABOVE``): the median time from a second remap within the hour to the failure
on the fresh fleets, 12 minutes. Above it the model's estimate stands: amid error growth the
failure came up to two hours after the second remap."""


CHRONIC_XIDS = 2.0
"""Memory XIDs (decayed count over 6 h) from which a GPU's XIDs may be read as a weak row's
habit rather than news (``_chronic_xids``)."""
CHRONIC_FRESH = 0.35
"""Largest share of those 6 h of XIDs that may have come within the last hour (decayed over 1 h
against over 6 h): a weak row raising XID 92 every hour or two reads 0.1-0.4, XIDs that began 40
minutes ago 0.7."""
CHRONIC_RISE = 0.3
"""Largest growth of the GPU's fastest corrected-error rate over the hour against its 6-h rate
(``err_rise_1h``, log: 0.3 is 35%) at which the XIDs may be read as habit: a rate that grows is a
failing part's whatever its XIDs say."""
MEMORY_XID_COLUMNS: tuple[str, ...] = ("xid_mem_5m", "xid_mem_1h", "xid_mem_6h")


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
        rules = isinstance(self.model, RulesModel)
        failed = {} if rules else feats.failed
        # Nor is a node that has gone silent: it is down or cut off, and its features are its
        # last, stale ones. A warning opened now comes after the fact: on 43 held-out fleets,
        # 7 of 37 false episodes opened 4-11 min after their node had failed and gone quiet.
        silent = {} if rules else {n: a for n, a in feats.silent.items() if n not in failed}
        # Nor are a node's links held against it where they are slow only towards a worse peer.
        node_frame, link_frame = (feats.node, feats.link) if rules else explain_away(feats)
        # Nor read on links a few percent off the fleet's (the rules never did).
        if not rules:
            node_frame = link_dead_zone(node_frame, LINK_Z_COLUMNS["node"])
            link_frame = link_dead_zone(link_frame, LINK_Z_COLUMNS["link"])
        parts = []
        for kind, frame in (("gpu", feats.gpu), ("node", node_frame), ("link", link_frame)):
            if not len(frame):
                continue
            nodes = frame["node"].to_numpy(dtype=object)
            gone = np.isin(nodes, [*failed, *silent])
            risk, lead = np.zeros(len(frame)), np.full(len(frame), np.nan)
            signals: list[tuple[str, ...]] = [_gone_reason(n, feats.t, failed, silent) if g else ()
                                              for n, g in zip(nodes, gone, strict=True)]
            if not gone.all():
                live = np.flatnonzero(~gone)
                r, ld, sig = self.model.score(kind, frame.iloc[live],
                                              explain_above=self.explain_above)
                risk[live], lead[live] = r, ld
                for i, s in zip(live, sig, strict=True):
                    signals[i] = s
            if kind == "gpu" and not rules:
                _chronic_xids(self.model, frame, ~gone, risk, lead, signals,
                              explain_above=self.explain_above)
                if feats.remaps:
                    _repeated_remaps(frame, ~gone, feats.remaps, risk, lead, signals)
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


LINK_NODE_COLUMNS: dict[str, str] = {"node_bw_med_z": "link_bw_med_z",
                                     "node_bw_trend_med_z": "link_bw_trend_med_z",
                                     "node_lat_med_z": "link_lat_med_z"}
"""Link features that carry the node aggregate of the endpoint the link is blamed on."""


LINK_DEAD_ZONE_Z = 1.0
"""Link z (bandwidth and latency against the fleet's, their trends, their held floors and the
node aggregates made of them) within this of zero on the side of risk (slower, later) are read as
zero when scored. Bandwidth z has a floor of 0.05 on its log scale, so 1 z is about 5%: in our
generator links of healthy nodes read within a fraction of that, and the models learned that a
node 3% slower for an hour is a NIC giving way. The fifth generator draws each pair of nodes its
own speed, 90-96% of the slower NIC's, and a node whose pairs drew low reads 3-4% slow for the
whole trace: with a straggler's step time as well, the node model read one at 0.79-0.89 and kept
it in alert for 45 hours (round 38). A NIC trained down to a lower speed reads 10-50% slow, far
outside; one that drifts by less than 5% is read once it drifts further. A reading on the side of
health keeps its value: it is weak evidence taken away, not evidence of health (read as zero, a
link 3% faster than the fleet's scores a little riskier; round 39)."""

LINK_Z_COLUMNS: dict[str, dict[str, int]] = {
    kind: {c: d for c, d in FEATURES_BY_KIND[kind].items() if c.startswith(prefixes)}
    for kind, prefixes in (("node", ("link_bw_", "link_lat_")),
                           ("link", ("bw_", "lat_", "node_bw_", "node_lat_", "peer_bw_")))}
"""The columns ``link_dead_zone`` reads, per frame, with their direction of risk (1: higher is
riskier, -1: lower is, 0: neither)."""


def link_dead_zone(frame: pd.DataFrame, columns: Mapping[str, int],
                   width: float = LINK_DEAD_ZONE_Z) -> pd.DataFrame:
    """``frame`` (a copy, where anything changes) with each of ``columns`` within ``width`` of
    zero on its side of risk set to zero (``LINK_DEAD_ZONE_Z``; both sides for a column of no
    direction); NaN stays unknown."""
    cols = [c for c in columns if c in frame.columns]
    if not len(frame) or not cols:
        return frame
    values = frame[cols].to_numpy(dtype=np.float64)
    healthy = values * np.array([columns[c] for c in cols], dtype=np.float64) < 0
    zoned = np.where(healthy, values, dead_zone(values, width))
    if np.array_equal(zoned, values, equal_nan=True):
        return frame
    frame = frame.copy()
    frame[cols] = zoned
    return frame


def explain_away(feats: Features) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The node and link frames with ``feats.explained`` in place: a node with links to a worse,
    clearly slow peer is scored on its other links, as the node it would be without that peer,
    and never as worse than on all of them (the models never learnt who is to blame for a path:
    a node probed by a failing NIC reads like one; on held-out fleets that was 8 of 20 false
    episodes)."""
    ex = feats.explained
    if not len(ex):
        return feats.node, feats.link
    node = feats.node.copy()
    hit = node["node"].isin(ex.index).to_numpy()
    for col in (c for c in ex.columns if c in NODE_FEATURES):
        node.loc[hit, col] = _healthier(node.loc[hit, col], ex.loc[node.loc[hit, "node"], col],
                                        NODE_FEATURES[col])
    link = feats.link
    if len(link):
        link = link.copy()
        hit = link["node"].isin(ex.index).to_numpy()
        for col, agg in LINK_NODE_COLUMNS.items():
            link.loc[hit, col] = _healthier(link.loc[hit, col], ex.loc[link.loc[hit, "node"], agg],
                                            LINK_FEATURES[col])
    return node, link


def _healthier(raw: pd.Series, explained: pd.Series, direction: int) -> np.ndarray:
    """Per row, whichever of the two reads healthier by the feature's monotone prior: taking a
    peer's links away only ever lifts blame (with three links left of four, the median can
    land on a worse one)."""
    a, b = raw.to_numpy(dtype=np.float64), explained.to_numpy(dtype=np.float64)
    return np.fmin(a, b) if direction > 0 else np.fmax(a, b)


def _repeated_remaps(frame: pd.DataFrame, live: np.ndarray, remaps: dict[tuple[str, int], int],
                     risk: np.ndarray, lead: np.ndarray, signals: list[tuple[str, ...]]) -> None:
    """Lift GPUs that remapped rows repeatedly to ``REMAP_RISK`` (in place), naming it first."""
    nodes = frame["node"].to_numpy(dtype=object)
    gpus = frame["gpu"].to_numpy(dtype=np.int64)
    for i in np.flatnonzero(live & np.isin(nodes, [node for node, _ in remaps])):
        n = remaps.get((str(nodes[i]), int(gpus[i])))
        if n and risk[i] < REMAP_RISK:
            if risk[i] < LEARNED_LEAD_ABOVE or np.isnan(lead[i]):
                lead[i] = REMAP_LEAD_S
            risk[i] = REMAP_RISK
            signals[i] = (f"HBM rows remapped {n} times in the last hour (XID 63/64)", *signals[i])


def _gone_reason(node: str, t: float, failed: dict[str, tuple[float, int]],
                 silent: dict[str, float]) -> tuple[str, ...]:
    if node in failed:
        return (f"failed: XID {failed[node][1]} {(t - failed[node][0]) / 60:.0f} min ago",)
    return (f"silent: no sample for {silent[node] / 60:.0f} min",)


def _chronic_xids(model: Model, frame: pd.DataFrame, live: np.ndarray, risk: np.ndarray,
                  lead: np.ndarray, signals: list[tuple[str, ...]], *,
                  explain_above: float) -> None:
    """GPUs whose memory XIDs are a habit, scored again without them, keeping the lower risk (in
    place). A weak HBM row that errs at a steady 100-300 an hour trips the driver's XID 92 rule
    every hour or two and never fails; the models met XID 92 only with precursors and short
    bursts, and read such GPUs of a held-out generator at 0.65-0.92 for days (14 of its 62 false
    episodes). Trained on such rows instead, a model learnt to discount memory XIDs everywhere and
    no longer warned of an ECC ramp in its first minutes (predictor/ROUNDS.md, rounds 30 and 32).
    Here only XIDs that have come for hours (``CHRONIC_XIDS``, ``CHRONIC_FRESH``), on an error
    rate that does not grow (``CHRONIC_RISE``), are set aside: the errors themselves still count."""
    x6 = frame["xid_mem_6h"].to_numpy(dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        fresh = frame["xid_mem_1h"].to_numpy(dtype=np.float64) / x6
    rise = np.nan_to_num(frame["err_rise_1h"].to_numpy(dtype=np.float64), nan=0.0)
    hit = np.flatnonzero(live & (x6 >= CHRONIC_XIDS) & (fresh <= CHRONIC_FRESH)
                         & (rise <= CHRONIC_RISE))
    if not len(hit):
        return
    quiet = frame.iloc[hit].copy()
    quiet[list(MEMORY_XID_COLUMNS)] = 0.0
    r, ld, sig = model.score("gpu", quiet, explain_above=explain_above)
    for j, i in enumerate(hit):
        if r[j] < risk[i]:
            risk[i], lead[i] = r[j], ld[j]
            signals[i] = sig[j]
