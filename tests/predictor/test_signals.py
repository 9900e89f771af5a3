import numpy as np
import pandas as pd

from predictor.signals import describe, explain


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


def _either(x: pd.DataFrame) -> np.ndarray:
    # Memory XIDs or a fast SBE rate each suffice; the third column is at its healthy baseline.
    xid = x["xid_mem_1h"].to_numpy(dtype=np.float64) > 0
    sbe = x["sbe_rate_1h"].to_numpy(dtype=np.float64) > 3
    return np.where(xid | sbe, 0.9, 0.05)


def test_two_signals_either_of_which_suffices_are_both_named_and_nothing_at_baseline() -> None:
    x = pd.DataFrame({"xid_mem_1h": [2.0], "sbe_rate_1h": [5.0], "stale_intervals": [0.0]})
    baseline = np.array([0.0, 0.0, 0.0])
    [signals] = explain(_either, x, _either(x), baseline, above=0.2, top=3)
    assert sorted(signals) == ["2.0 memory XIDs in 1 h", "ECC single-bit errors 147/h over 1h"]


def test_a_risk_no_exported_signal_explains_names_none() -> None:
    # The risk rests on a column the fleet does not export: no signal rather than a wrong one.
    x = pd.DataFrame({"pcie_rate_5m": [0.0], "memtemp_dev": [np.nan]})
    assert explain(_risk, x, _risk(x), np.array([0.0, 0.0]), above=0.2, top=3) == [()]


def test_a_signal_that_reads_like_healthy_is_not_named() -> None:
    # The model reacts to the decayed trace of one XID long ago (0.04 "in 5 min"), but
    # "0.0 memory XIDs in 5 min" would tell the person on call nothing; the replays are named.
    # Nor does a step time held a hair above its baseline ("z=0.0" against "z=-0.0").
    def risk_fn(x: pd.DataFrame) -> np.ndarray:
        return np.clip(0.1 * x["pcie_rate_5m"].to_numpy(dtype=np.float64)
                       + 0.3 * (x["xid_mem_5m"].to_numpy(dtype=np.float64) > 0.01)
                       + 0.2 * (x["step_z_held_1h"].to_numpy(dtype=np.float64) > 0.0), 0.0, 1.0)

    x = pd.DataFrame({"pcie_rate_5m": [6.0], "xid_mem_5m": [0.04], "step_z_held_1h": [0.04]})
    [signals] = explain(risk_fn, x, risk_fn(x), np.array([0.0, 0.0, -0.02]), above=0.2, top=3)
    assert signals == ("PCIe replays 402/h over 5m",)


def test_a_feature_on_its_good_side_is_not_named() -> None:
    # This model leans on a fresh sample (0 intervals stale is riskier than its baseline of 1)
    # and on a faster SM clock; neither is a reason to drain a node, the SBE rate is.
    def risk_fn(x: pd.DataFrame) -> np.ndarray:
        sbe = x["sbe_rate_1h"].to_numpy(dtype=np.float64)
        fresh = x["stale_intervals"].to_numpy(dtype=np.float64) < 0.5
        fast = x["clock_dev"].to_numpy(dtype=np.float64) > 0.03
        return np.clip(0.1 * sbe + 0.2 * fresh + 0.2 * fast, 0.0, 1.0)

    x = pd.DataFrame({"sbe_rate_1h": [5.0], "stale_intervals": [0.0], "clock_dev": [0.05]})
    baseline = np.array([0.0, 1.0, 0.0])
    [named] = explain(risk_fn, x, risk_fn(x), baseline, above=0.2, top=3,
                      direction=np.array([1.0, 0.0, -1.0]))
    assert named == ("ECC single-bit errors 147/h over 1h",)
    [unguided] = explain(risk_fn, x, risk_fn(x), baseline, above=0.2, top=3)
    # Without directions the faster clock would be named too.
    assert unguided == ("ECC single-bit errors 147/h over 1h", "SM clock +5% vs node peers")


def test_a_held_signal_says_how_long_it_has_held() -> None:
    # Error growth at 10.8x its 6-h rate: held for 15 minutes is not held for the hour, and an
    # operator deciding whether to drain reads the difference.
    ratio = float(np.log(10.8))
    assert describe("err_rise_held_15m", ratio).endswith(", held for the last 15 minutes")
    assert describe("err_rise_held_1h", ratio).endswith(", held for the last hour")
    assert "10.8x" in describe("err_rise_held_15m", ratio)


def _rates(sbe: tuple[float, float], pcie: tuple[float, float],
           nvlink: tuple[float, float]) -> dict[str, float]:
    """log1p errors/h over 5m and 6h per counter, and the pooled rise the features derive."""
    row = {}
    for name, (r5, r6) in (("sbe", sbe), ("pcie", pcie), ("nvlink", nvlink)):
        row[f"{name}_rate_5m"], row[f"{name}_rate_6h"] = np.log1p(r5), np.log1p(r6)
    row["err_rise_5m"] = max(row[f"{c}_rate_5m"] - row[f"{c}_rate_6h"]
                             for c in ("sbe", "pcie", "nvlink"))
    return row


def _rise_risk(x: pd.DataFrame) -> np.ndarray:
    # Growth is what alarms this model, whichever counter grows; steady rates do not.
    rise = x["err_rise_5m"].to_numpy(dtype=np.float64)
    held = x.get("err_rise_held_15m", pd.Series(0.0, index=x.index)).to_numpy(dtype=np.float64)
    return np.clip(0.1 * rise + 0.1 * held, 0.0, 1.0)


def test_growth_pooled_over_counters_names_the_counter_that_grew() -> None:
    # SBE runs at a steady 400/h (no growth), PCIe replays jump from 10/h to 1,100/h (100x): the
    # person on call should read "PCIe replays", not "an error counter".
    x = pd.DataFrame([_rates(sbe=(400.0, 400.0), pcie=(1100.0, 10.0), nvlink=(0.0, 0.0))])
    [signals] = explain(_rise_risk, x, _rise_risk(x), np.zeros(x.shape[1]), above=0.2, top=1)
    assert signals == ("PCIe replays at 100x their 6-h rate over 5m",)
    # NVLink CRC errors growing instead: the name follows the counter.
    x = pd.DataFrame([_rates(sbe=(400.0, 400.0), pcie=(0.0, 0.0), nvlink=(300.0, 2.0))])
    [signals] = explain(_rise_risk, x, _rise_risk(x), np.zeros(x.shape[1]), above=0.2, top=1)
    assert signals == ("NVLink CRC errors at 100x their 6-h rate over 5m",)
    # A floor held for the hour names the counter that held it.
    held = {"sbe_held_1h": np.log1p(30.0), "pcie_held_1h": np.log1p(200.0),
            "nvlink_held_1h": np.nan}
    assert describe("err_held_1h", np.log1p(200.0), held) == (
        "PCIe replays above 200/h all of the last hour")
    # A row without the per-counter rates cannot say which: it says so rather than guess.
    assert describe("err_rise_5m", float(np.log(101.0))) == (
        "an error counter (ECC/PCIe/NVLink) at 101x its 6-h rate over 5m")


def test_a_reading_and_the_same_reading_held_are_named_once_as_held() -> None:
    # Replays at 100x for the last 15 minutes: "at 100x over 5m" and "at 100x over 5m, held
    # for the last 15 minutes" would spend two of three signals on one fact.
    row = _rates(sbe=(0.0, 0.0), pcie=(1100.0, 10.0), nvlink=(0.0, 0.0))
    x = pd.DataFrame([{**row, "err_rise_held_15m": row["err_rise_5m"]}])
    [signals] = explain(_rise_risk, x, _rise_risk(x), np.zeros(x.shape[1]), above=0.2, top=3)
    assert signals == ("PCIe replays at 100x their 6-h rate over 5m, held for the last "
                       "15 minutes",)
    # Held at a lower floor (20x) while at 100x now: two facts, both named.
    x = pd.DataFrame([{**row, "err_rise_held_15m": float(np.log(20.0))}])
    [signals] = explain(_rise_risk, x, _rise_risk(x), np.zeros(x.shape[1]), above=0.2, top=3)
    assert sorted(signals) == [
        "PCIe replays at 100x their 6-h rate over 5m",
        "PCIe replays at 20x their 6-h rate over 5m, held for the last 15 minutes"]
