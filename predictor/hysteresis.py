"""When to open and resolve alerts: hysteresis, minimum persistence and one alert per node.

An alert is a state. A node's alert opens when its riskiest entity has stayed at or above
``fire_at`` for ``persist_s`` seconds. Other lanes trade level for time: at once above
``fire_now_at`` (optionally only once the risk has stood at or above ``slow_at`` for
``fire_now_hold_s``); after 10 minutes at or above the quick lane's ``quick_at`` (5 while the
riskiest entity is a link): the last minutes of a short precursor; after 25 minutes at or above
the middle lane's ``mid_at``: a risk that climbs slowly towards a failure less than an hour
away; or after an hour at or above the lower ``slow_at``: a weak signal that never lets go. It
resolves once the risk has stayed below ``resolve_below`` for ``resolve_after_s``, or when the
node stops reporting. The alert keeps naming the entity it opened for, so a node gets one alert
per episode however many of its GPUs and links join in. Times are seconds, so the same policy
serves 30-s service ticks and 5-min backtest ticks. The defaults were chosen on held-out
generator seeds (benchmarks/backtest.py) to keep false episodes near 10 per 1,000 node-days.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np
import pandas as pd

Action = Literal["fire", "update", "resolve"]


@dataclass(frozen=True, kw_only=True)
class PolicyConfig:
    """Thresholds and timings of the alert state machine."""

    fire_at: float = 0.55
    """Risk at or above which a node becomes a candidate."""
    fire_now_at: float = 0.92
    """Risk at or above which a node fires without waiting for persistence. The shipped average
    of three models, whose mean stops below a single model's top, reaches it in the last minutes
    of a short precursor (an ECC storm whose risk leaps from 0.1 to 0.96 within one 5-min tick);
    lower values bring the third generator's error bursts back as false episodes."""
    fire_now_hold_s: float = 0.0
    """How long the risk must already have stood at or above ``slow_at`` before ``fire_now_at``
    fires at once (0: at the first tick; ignored without ``slow_at``). Off since ``fire_now_at``
    went from 0.85 to 0.92: a hold of one 5-min tick kept out leaps from nothing to 0.85-0.9 (a
    slow round of link probes, a burst of errors), which 0.92 keeps out by itself, and it cost
    the short precursors whose risk leaps in their last minutes (``benchmarks/policy_sweep.py``;
    predictor/ROUNDS.md has the figures)."""
    persist_s: float = 900.0
    """How long a candidate must stay at or above ``fire_at`` before firing."""
    quick_at: float | None = 0.65
    """A quick lane above ``fire_at``: a node whose risk stays at or above this for
    ``quick_persist_s`` fires too. A short precursor's risk often stands at 0.65-0.85 for its
    last 10-15 minutes, too late for ``persist_s``; a burst that passes rarely holds it for 10.
    None disables it."""
    quick_persist_s: float = 600.0
    """How long the risk must hold at or above ``quick_at``."""
    link_quick_persist_s: float | None = 300.0
    """The quick lane's hold for a node whose riskiest entity is a link (and stays one): a NIC
    or cable precursor, seen only in probe rounds that the link features already average, often
    reads 0.65-0.9 for just its last 5-10 minutes, and there are no error bursts that pass on a
    link to hold out (congestion is read against slow probes elsewhere). Chosen with
    ``benchmarks/policy_sweep.py`` on the 30 fresh-seed fleets, where it catches 2 more link
    failures at the same 5 false episodes, and confirmed on the five suites (2 more, one false
    episode fewer): three of the four are links whose alert used to open one 5-min tick after
    their failure. At once (0 s) brought 16 false episodes more. None: links wait
    ``quick_persist_s`` like the rest."""
    slow_at: float | None = 0.25
    """A second, slow lane: a node whose risk stays at or above this for ``slow_persist_s``
    fires too (a weak signal that never lets go). None disables it."""
    slow_persist_s: float = 3600.0
    """How long the risk must hold above ``slow_at``."""
    mid_at: float | None = 0.35
    """A middle lane between the slow one and ``fire_at``: a node whose risk stays at or above
    this for ``mid_persist_s`` fires too. A short precursor (under an hour) often lifts the risk
    a little at a time, 0.3-0.5 for half an hour before it crosses ``fire_at``, too late for
    ``persist_s`` and too short for the slow lane. Chosen with ``benchmarks/policy_sweep.py``
    on 30 fresh-seed fleets and the five suites: of 0.30-0.40 held for 20-30 minutes, 0.35 for
    25 minutes adds catches on both sets and no false episode on either (predictor/ROUNDS.md has
    the sweep). None disables it."""
    mid_persist_s: float = 1500.0
    """How long the risk must hold at or above ``mid_at``."""
    resolve_below: float = 0.15
    """Risk below which a firing node starts to count towards resolving."""
    resolve_after_s: float = 1800.0
    """How long the risk must stay below ``resolve_below`` to resolve."""

    def __post_init__(self) -> None:
        for name in ("slow_at", "mid_at", "quick_at"):
            v = getattr(self, name)
            if v is not None and not 0.0 <= v <= 1.0:
                raise ValueError(f"policy.{name}={v} must be within [0, 1]")
        for name in ("fire_at", "fire_now_at", "resolve_below"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"policy.{name}={v} must be within [0, 1]")
        if self.resolve_below > self.fire_at:
            raise ValueError(f"policy.resolve_below={self.resolve_below} must be <= "
                             f"fire_at={self.fire_at}")
        for name in ("fire_now_hold_s", "persist_s", "quick_persist_s", "slow_persist_s",
                     "mid_persist_s", "resolve_after_s", "link_quick_persist_s"):
            if (getattr(self, name) or 0.0) < 0:
                raise ValueError(f"policy.{name}={getattr(self, name)} must be >= 0")

    @property
    def lanes(self) -> tuple[tuple[float | None, float, str | None], ...]:
        """(level, hold, kind) of each lane that fires on a risk held long enough: main, quick,
        the quick lane's links, middle, slow (level None: the lane is off; kind None: any
        entity, else only while the node's riskiest entity is of that kind). The slow lane
        comes last: ``fire_now_hold_s`` is measured on it."""
        link_level = None if self.link_quick_persist_s is None else self.quick_at
        return ((self.fire_at, self.persist_s, None),
                (self.quick_at, self.quick_persist_s, None),
                (link_level, self.link_quick_persist_s or 0.0, "link"),
                (self.mid_at, self.mid_persist_s, None), (self.slow_at, self.slow_persist_s, None))

    def compressed(self, factor: float) -> PolicyConfig:
        """This policy on a clock ``factor`` times faster: every lane's hold and the wait to
        resolve divided by ``factor``, the levels kept. For a replay or demo that compresses
        hours into minutes (``foreshock demo``: 150, the 15-minute hold at ``fire_at`` in 6 s,
        the middle lane's 25 minutes in 10 s)."""
        if not factor > 0:
            raise ValueError(f"policy time compression {factor} must be > 0")
        if factor == 1:
            return self
        link = self.link_quick_persist_s
        return replace(self, fire_now_hold_s=self.fire_now_hold_s / factor,
                       persist_s=self.persist_s / factor,
                       quick_persist_s=self.quick_persist_s / factor,
                       link_quick_persist_s=None if link is None else link / factor,
                       slow_persist_s=self.slow_persist_s / factor,
                       mid_persist_s=self.mid_persist_s / factor,
                       resolve_after_s=self.resolve_after_s / factor)

    def overridden(self, *, fire_at: float | None = None,
                   persist_s: float | None = None) -> PolicyConfig:
        """This policy with a user's ``fire_at`` / ``persist_s`` (None keeps the default); an
        alert still resolves only below the new ``fire_at``, and the quick lane never opens one
        below it."""
        fire = self.fire_at if fire_at is None else fire_at
        quick = None if self.quick_at is None else max(self.quick_at, fire)
        return replace(self, fire_at=fire, quick_at=quick,
                       persist_s=self.persist_s if persist_s is None else persist_s,
                       resolve_below=min(self.resolve_below, fire))


@dataclass(frozen=True, kw_only=True)
class Transition:
    """What the policy decided for one node at one instant."""

    action: Action
    ts: float
    node: str
    kind: str
    gpu: int | None
    peer: str | None
    risk: float
    lead_s: float | None
    signals: tuple[str, ...]


@dataclass(kw_only=True)
class _NodeState:
    since: tuple[float | None, ...] = ()
    """Per lane of ``PolicyConfig.lanes``, since when the risk has stood at its level."""
    below_since: float | None = None
    firing: dict[str, object] | None = None


@dataclass
class AlertPolicy:
    """The per-node state machine; feed it each risk frame in time order."""

    config: PolicyConfig = field(default_factory=PolicyConfig)
    nodes: dict[str, _NodeState] = field(default_factory=dict)

    def step(self, risks: pd.DataFrame, t: float) -> list[Transition]:
        """Transitions at ``t``: fires, updates of firing alerts, resolves."""
        cfg = self.config
        lanes = cfg.lanes
        out: list[Transition] = []
        top = _riskiest_per_node(risks)
        for node, row in top.items():
            st = self.nodes.setdefault(node, _NodeState())
            risk = float(row["risk"])  # type: ignore[arg-type]
            if st.firing is None:
                kind = str(row["kind"])
                st.since = tuple(_since(since, level if lane_kind in (None, kind) else None,
                                        risk, t)
                                 for since, (level, _, lane_kind) in
                                 zip(st.since or (None,) * len(lanes), lanes, strict=True))
                slow_since = st.since[-1]
                held = cfg.slow_at is None or (slow_since is not None
                                               and t - slow_since >= cfg.fire_now_hold_s)
                fire_now = risk >= max(cfg.fire_now_at, cfg.fire_at) and held
                if fire_now or any(since is not None and t - since >= hold
                                   for since, (_, hold, _) in zip(st.since, lanes, strict=True)):
                    st.firing = dict(row)
                    st.below_since = None
                    out.append(_transition("fire", t, node, row))
                continue
            if risk >= cfg.resolve_below:
                st.below_since = None
            else:
                st.below_since = t if st.below_since is None else st.below_since
                if t - st.below_since >= cfg.resolve_after_s:
                    out.append(_transition("resolve", t, node, {**st.firing, "risk": risk}))
                    self.nodes[node] = _NodeState()
                    continue
            # A risk too low to explain (or explained by nothing readable) leaves the alert
            # with the signals that last drove it, not with none while it is still open.
            if row["signals"]:
                st.firing["signals"] = row["signals"]
            out.append(_transition("update", t, node, {**st.firing, "risk": risk,
                                                       "lead_s": row["lead_s"]}))
        for node, st in list(self.nodes.items()):
            if node not in top and st.firing is not None:
                # The node stopped reporting (failed, drained or gone): nothing left to warn of.
                out.append(_transition("resolve", t, node, st.firing))
                del self.nodes[node]
            elif node not in top:
                del self.nodes[node]
        return out

    def firing(self) -> list[str]:
        return [n for n, st in self.nodes.items() if st.firing is not None]


def _since(since: float | None, level: float | None, risk: float, t: float) -> float | None:
    """When a lane's risk started to stand at or above ``level`` (None: it does not now, or the
    lane is off)."""
    if level is None or risk < level:
        return None
    return t if since is None else since


def _riskiest_per_node(risks: pd.DataFrame) -> dict[str, dict[str, object]]:
    if not len(risks):
        return {}
    order = np.argsort(-risks["risk"].to_numpy(dtype=np.float64), kind="stable")
    best = risks.iloc[order].drop_duplicates("node", keep="first")
    return {str(r["node"]): {str(k): v for k, v in r.items()} for r in best.to_dict("records")}


def _transition(action: Action, t: float, node: str, row: dict[str, object]) -> Transition:
    gpu = int(row["gpu"])  # type: ignore[call-overload]
    lead = row.get("lead_s")
    lead_s = float(lead) if isinstance(lead, int | float) and np.isfinite(lead) else None
    return Transition(
        action=action, ts=t, node=node, kind=str(row["kind"]), gpu=gpu if gpu >= 0 else None,
        peer=str(row["peer"]) or None if row["kind"] == "link" else None,
        risk=float(row["risk"]),  # type: ignore[arg-type]
        lead_s=lead_s,
        signals=tuple(row["signals"] or ()),  # type: ignore[arg-type]
    )
