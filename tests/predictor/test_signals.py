import numpy as np
import pandas as pd

from predictor.signals import explain


def _risk(x: pd.DataFrame) -> np.ndarray:
    # A model that reads a missing HBM temperature as mildly alarming, and PCIe replays as very.
    pcie = x["pcie_rate_5m"].to_numpy(dtype=np.float64)
    missing = np.isnan(x["memtemp_dev"].to_numpy(dtype=np.float64))
    return np.clip(0.1 * pcie + 0.3 * missing, 0.0, 1.0)


def test_a_column_the_fleet_does_not_export_is_never_named_as_a_signal() -> None:
    x = pd.DataFrame({"pcie_rate_5m": [6.0, 0.0], "memtemp_dev": [np.nan, np.nan]})
    risk = _risk(x)
    signals = explain(_risk, x, risk, np.array([0.0, 0.0]), above=0.2, top=3)
    assert signals[0] == ("PCIe replays 402/h over 5m",)
    assert all("memtemp" not in s and "HBM" not in s for s in signals[0] + signals[1])


def test_rows_below_the_threshold_get_no_signals() -> None:
    x = pd.DataFrame({"pcie_rate_5m": [1.0], "memtemp_dev": [0.0]})
    assert explain(_risk, x, _risk(x), np.array([0.0, 0.0]), above=0.2, top=3) == [()]
