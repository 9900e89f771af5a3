import numpy as np
import pandas as pd

from predictor.sustained import PEAKS, SNAPSHOT_S, WINDOW_S, SustainedHistory

T0 = 1.7e9


def _gpu_frame(pcie: float, clock_dev: float = 0.0) -> pd.DataFrame:
    row = {"node": ["n0", "n1"], "gpu": [0, 0], "sbe_rate_5m": [0.0, 0.0],
           "pcie_rate_5m": [pcie, 0.0], "nvlink_rate_5m": [0.0, 0.0], "temp_dev": [0.0, np.nan],
           "clock_dev": [clock_dev, 0.0],
           "throttle_thermal_5m": [0.0, 0.0], "err_rise_5m": [pcie / 2, 0.0],
           "err_rate_5m": [pcie, 0.0]}
    return pd.DataFrame(row)


def _run(signal: list[float], *, every_s: float = SNAPSHOT_S, clock: list[float] | None = None
         ) -> pd.DataFrame:
    history = SustainedHistory()
    out = None
    for i, v in enumerate(signal):
        out = history.add_to("gpu", _gpu_frame(v, clock[i] if clock else 0.0), T0 + i * every_s)
    assert out is not None
    return out


def test_a_signal_that_holds_for_an_hour_keeps_its_floor() -> None:
    held = _run([7.0] * 14)  # 70 minutes of ~1,100 replays/h
    assert held.loc[0, "pcie_held_1h"] == 7.0
    assert held.loc[1, "pcie_held_1h"] == 0.0  # its healthy neighbour


def test_a_burst_that_stopped_within_the_hour_is_not_sustained() -> None:
    burst = [0.0] * 4 + [7.5] * 6 + [7.5] * 4  # 50 minutes of a burst after 20 quiet minutes
    assert _run(burst).loc[0, "pcie_held_1h"] == 0.0
    # Rising for the whole hour: the floor is the lowest level it held, not the peak.
    rising = list(np.linspace(3.0, 8.0, 14))
    in_window = rising[-int(WINDOW_S // SNAPSHOT_S):]  # snapshots newer than an hour ago
    assert _run(rising).loc[0, "pcie_held_1h"] == min(in_window)


def test_history_shorter_than_the_window_claims_nothing() -> None:
    short = int(WINDOW_S / SNAPSHOT_S) - 3
    assert _run([7.0] * short).loc[0, "pcie_held_1h"] == 0.0


def test_less_is_worse_features_keep_their_ceiling_and_nan_stays_unknown() -> None:
    clock = [-0.3] * 14
    held = _run([0.0] * 14, clock=clock)
    assert held.loc[0, "clock_dev_held_1h"] == -0.3  # slow all hour: its best is still -30%
    clock[6] = -0.01  # one snapshot at full speed
    assert _run([0.0] * 14, clock=clock).loc[0, "clock_dev_held_1h"] == -0.01
    assert np.isnan(held.loc[1, "temp_dev_held_1h"])  # a GPU that exports no temperature
    assert held.loc[0, "temp_dev_held_1h"] == 0.0


def test_reading_more_often_than_snapshots_changes_nothing() -> None:
    slow = _run([6.0] * 14)
    fast = _run([6.0] * (14 * 10), every_s=SNAPSHOT_S / 10)
    assert slow.loc[0, "pcie_held_1h"] == fast.loc[0, "pcie_held_1h"] == 6.0
    assert _run([6.0] * (10 * 10), every_s=SNAPSHOT_S / 10).loc[0, "pcie_held_1h"] == 0.0


def test_error_growth_held_for_15_minutes_outlasts_a_burst_and_needs_no_hour() -> None:
    # err_rise_5m reads pcie / 2 in these frames: 20 minutes of growth after 40 quiet ones.
    grown = _run([0.0] * 8 + [7.0] * 5)
    assert grown.loc[0, "err_rise_held_15m"] == 3.5
    assert grown.loc[0, "err_rise_held_1h"] == 0.0  # an hour's floor still sees the quiet
    # A burst of 5 minutes that has passed holds nothing, nor does one just begun.
    assert _run([0.0] * 8 + [7.0] + [0.0] * 2).loc[0, "err_rise_held_15m"] == 0.0
    assert _run([0.0] * 8 + [7.0] * 2).loc[0, "err_rise_held_15m"] == 0.0
    # A history of 5 minutes claims nothing; 10 minutes of snapshots (15 of signal) does.
    assert _run([7.0] * 2).loc[0, "err_rise_held_15m"] == 0.0
    assert _run([7.0] * 3).loc[0, "err_rise_held_15m"] == 3.5


def test_the_peak_of_a_held_error_rate_forgets_after_an_hour() -> None:
    # A second pass over ``PEAKS``: the ceiling over the hour of the 15-minute floor.
    history, peaks = SustainedHistory(), SustainedHistory(PEAKS)
    out = None
    for i, v in enumerate([0.0] * 4 + [8.0] * 4 + [2.0] * 14):
        out = peaks.add_to("gpu", history.add_to("gpu", _gpu_frame(v), T0 + i * SNAPSHOT_S),
                           T0 + i * SNAPSHOT_S)
        if i == 9:  # held at 8 for 15 minutes, now falling
            assert out.loc[0, "err_rate_peak_1h"] == 8.0
            assert out.loc[0, "err_rate_held_15m"] == 2.0
    assert out is not None and out.loc[0, "err_rate_peak_1h"] == 2.0
