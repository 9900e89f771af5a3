import numpy as np

from predictor.train_default import OPTIONAL_GPU_COLUMNS, drop_optional_columns
from tests.predictor.conftest import Spec, make_trace


def test_training_fleets_differ_in_what_they_export_but_keep_every_error_counter() -> None:
    trace = make_trace(Spec(hours=0.5))
    rng = np.random.default_rng(0)
    kept = [set(drop_optional_columns(trace, rng).gpu.columns) for _ in range(60)]
    optional = set(OPTIONAL_GPU_COLUMNS) & set(trace.gpu.columns)
    assert optional >= {"gpu.clock.sm", "gpu.power", "gpu.throttle.thermal", "gpu.ecc.dbe"}
    for column in optional:  # each optional column is missing from some fleets, not all
        assert 0 < sum(column not in k for k in kept) < len(kept)
    for column in ("gpu.ecc.sbe", "gpu.pcie.replay", "gpu.temperature", "ts", "node", "gpu"):
        assert all(column in k for k in kept)
    # The same seed drops the same columns: the default model stays reproducible.
    again = set(drop_optional_columns(trace, np.random.default_rng(0)).gpu.columns)
    assert again == kept[0]
    assert trace.gpu.shape[1] == len(set(trace.gpu.columns))  # the input is left untouched
