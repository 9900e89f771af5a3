"""Simulated point-to-point link probes between nodes (``links.csv.gz``).

Every ``link_interval_s`` each node probes its ring neighbour and a peer that rotates each
round, as a periodic ``ib_write_bw``/``ib_write_lat`` pair would. A probe's bandwidth is the
worse of the two ends' NIC/cable health times network congestion, with a few outliers.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from predictor.fleet_sim import LINK_BYTES_S, FleetState
from predictor.generator_config import GeneratorConfig


def _congestion(state: FleetState, rng: np.random.Generator, config: GeneratorConfig,
                kl: np.ndarray) -> np.ndarray:
    """(R, N) bandwidth factor from congestion on leaf switches (two racks each), then recovery."""
    nodes = state.link_factor.shape[1]
    factor = np.ones((len(kl), nodes))
    count = int(rng.poisson(config.congestion_per_day * config.confounders * config.days))
    for _ in range(count):
        leaf = int(rng.integers(int(state.racks.max()) // 2 + 1))
        members = np.flatnonzero(state.racks // 2 == leaf)
        t0 = rng.uniform(state.t[0], state.t[-1])
        rounds = (state.t[np.minimum(kl, len(state.t) - 1)] >= t0) & (
            state.t[np.minimum(kl, len(state.t) - 1)] < t0 + rng.uniform(300, 2400))
        depth = rng.uniform(0.5, 0.85)
        factor[np.ix_(rounds, members)] = np.minimum(factor[np.ix_(rounds, members)], depth)
    return factor


def build_links(state: FleetState, rng: np.random.Generator, config: GeneratorConfig,
                names: np.ndarray) -> pd.DataFrame:
    """The probe rows: ``ts,src,dst,net.link.bandwidth,net.link.latency``."""
    nodes = state.link_factor.shape[1]
    cols = ["ts", "src", "dst", "net.link.bandwidth", "net.link.latency"]
    if nodes < 2:
        return pd.DataFrame({c: pd.Series(dtype="float64" if c not in ("src", "dst") else str)
                             for c in cols})
    t_probe = np.arange(state.t[0] + 7.0, state.t[-1] + 1e-9, config.link_interval_s)
    kl = np.minimum(np.searchsorted(state.t, t_probe), len(state.t) - 1)
    rounds = np.arange(len(t_probe))
    src = np.broadcast_to(np.arange(nodes)[None, :, None], (len(kl), nodes, 2))
    ring = (np.arange(nodes) + 1) % nodes
    step = 2 + rounds % max(nodes - 3, 1) if nodes > 3 else np.ones_like(rounds)
    peer = (np.arange(nodes)[None, :] + step[:, None]) % nodes
    dst = np.stack([np.broadcast_to(ring[None, :], peer.shape), peer], axis=2)
    src, dst = src.reshape(len(kl), -1), dst.reshape(len(kl), -1)
    health = state.link_factor[kl]  # (R, N)
    cong = _congestion(state, rng, config, kl)
    r_idx = np.arange(len(kl))[:, None]
    bw_factor = np.minimum(health[r_idx, src], health[r_idx, dst])
    bw_factor = bw_factor * np.minimum(cong[r_idx, src], cong[r_idx, dst])
    noise = rng.normal(1.0, 0.02 * config.noise, bw_factor.shape)
    outlier = rng.random(bw_factor.shape) < 0.01 * config.confounders
    noise = np.where(outlier, rng.uniform(0.3, 0.9, bw_factor.shape), noise)
    bandwidth = LINK_BYTES_S * 0.92 * bw_factor * np.clip(noise, 0.05, None)
    same_rack = state.racks[src] == state.racks[dst]
    base_lat = np.where(same_rack, 3.5e-6, 6.0e-6)
    latency = base_lat * (1 + 3.0 * (1 - bw_factor)) * rng.lognormal(0, 0.05 * config.noise,
                                                                       bw_factor.shape)
    latency = np.where(outlier, latency * rng.uniform(1.5, 4.0, latency.shape), latency)
    present = state.node_present[kl]
    keep = present[r_idx, src] & present[r_idx, dst] & (src != dst)
    keep &= rng.random(keep.shape) >= config.drop_rate * config.confounders * 5
    ts = np.broadcast_to(t_probe[:, None], keep.shape)
    return pd.DataFrame({
        "ts": np.round(ts[keep] + rng.uniform(0, 2.0, int(keep.sum())), 3),
        "src": names[src[keep]],
        "dst": names[dst[keep]],
        "net.link.bandwidth": np.round(bandwidth[keep], -6),
        "net.link.latency": np.round(latency[keep], 9),
    }, columns=cols)
