"""`resources.partial_sums`: a worker sends one sum of its clients' deltas a round. The model matches the one-delta-
per-client run within float summation; per-client figures are unchanged; rounds of the loss decomposition keep
each client's delta; a method with its own rule is told it sends deltas."""

from __future__ import annotations

import numpy as np
import pytest

from raytune_fl.config import ExperimentConfig
from raytune_fl.engine.data import prepare_data
from raytune_fl.engine.federation import EngineNotice, Federation, in_process_pool
from raytune_fl.engine.report import RoundReport
from raytune_fl.metrics import CLIENTS, LOSS_LOCAL, TRAIN_LOSS, UPLOAD_BYTES, VAL_ACC


def _experiment(sums: bool, **changes) -> ExperimentConfig:
    base = {
        "dataset": "digits",
        "partition": {"kind": "dirichlet", "alpha": 0.5, "clients": 6, "min_size": 20},
        "participation": 0.5,
        "rounds": 3,
        "batch_size": 32,
        "resources": {"actors": 0, "partial_sums": sums},
        "diagnostics": {"every": 0},
    }
    return ExperimentConfig.model_validate({**base, **changes})


class _Counting:
    """The in-process pool, recording which rounds were submitted as sums."""

    def __init__(self) -> None:
        self.summed: list[bool] = []

    def __call__(self, data, spec):
        pool = in_process_pool(data, spec)
        submit_all = pool.submit_all

        def recording(jobs, summed=False):
            self.summed.append(summed)
            return submit_all(jobs, summed)

        pool.submit_all = recording
        return pool


def _run(sums: bool, method: str, rounds: int, data) -> tuple[Federation, list[RoundReport], list[bool]]:
    counting, rows = _Counting(), []
    federation = Federation(_experiment(sums, rounds=rounds), method, {}, pool_factory=counting, data=data)
    federation.run(rows.append)
    return federation, rows, counting.summed


@pytest.mark.parametrize("method", ["fedavg", "fedprox"])
def test_a_round_of_partial_sums_gives_the_per_client_model_within_float_summation(method, one_thread):
    data = prepare_data(_experiment(False))
    (plain, plain_rows, _), (sums, sums_rows, summed) = (_run(s, method, 1, data) for s in (False, True))
    assert summed == [True]
    for name, value in plain.weights.items():
        if np.issubdtype(value.dtype, np.floating):  # float32 products against float64 ones: the last bits
            np.testing.assert_allclose(sums.weights[name], value, rtol=1e-5, atol=1e-7)
        else:
            np.testing.assert_array_equal(sums.weights[name], value)
    # the clients trained from the same model: their own figures are identical, and each still counts as sending
    assert sums_rows[0][TRAIN_LOSS] == plain_rows[0][TRAIN_LOSS]
    assert sums_rows[0][UPLOAD_BYTES] == plain_rows[0][UPLOAD_BYTES] > 0
    assert sums_rows[0][CLIENTS] == plain_rows[0][CLIENTS] == 3


def test_later_rounds_drift_only_as_float_noise_does(one_thread):
    """Training amplifies the last bits (a 1e-7 nudge of round 1's model moves round 3's weights by ~1e-4 on this
    setting, measured): over rounds the runs agree in accuracy, not in bits."""
    data = prepare_data(_experiment(False))
    (_, plain_rows, _), (_, sums_rows, summed) = (_run(s, "fedavg", 3, data) for s in (False, True))
    assert summed == [True] * 3
    assert abs(sums_rows[-1][VAL_ACC] - plain_rows[-1][VAL_ACC]) <= 0.02
    assert abs(sums_rows[-1][TRAIN_LOSS] - plain_rows[-1][TRAIN_LOSS]) <= 0.01


def test_the_decomposition_rounds_keep_each_clients_delta(one_thread):
    counting = _Counting()
    experiment = _experiment(True, diagnostics={"every": 2, "decomposition": True})
    rows: list[RoundReport] = []
    Federation(experiment, "fedavg", {}, pool_factory=counting).run(rows.append)
    assert counting.summed == [True, False, False]  # round 2 (every 2) and the last evaluate each client's model
    assert all(LOSS_LOCAL in rows[i] for i in (1, 2))


def test_a_method_with_its_own_rule_is_told_and_sends_deltas(one_thread):
    with pytest.warns(EngineNotice, match="partial_sums: scaffold aggregates by its own rule"):
        federation = Federation(_experiment(True), "scaffold", {})
    assert not federation.partial_sums and not federation.sums_round(1)
    assert Federation(_experiment(True), "fedavg", {}).sums_round(1)
    assert not Federation(_experiment(False), "fedavg", {}).sums_round(1)
