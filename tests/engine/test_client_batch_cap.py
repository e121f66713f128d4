"""Issue 46: resources.client_batch above the clients a round trains is capped at them (engine/federation.py's
client_batch; the command says so once, before Ray starts: tests/cli/test_bad_inputs.py), and the capped value
trains exactly as the one given: pool.py's client_batches never forms a batch wider than a round's clients."""

from __future__ import annotations

import numpy as np
import pytest

from raytune_fl.config import ExperimentConfig, clients_per_round
from raytune_fl.engine.data import prepare_data
from raytune_fl.engine.federation import Federation, client_batch
from raytune_fl.engine.worker import ModelSpec
from tests.support.resume_check import small_federation, untimed

MODEL = ModelSpec("simple_cnn", 1, 10, (8, 8))


def _experiment(batch: int | str, participation: float = 1.0, **resources) -> ExperimentConfig:
    experiment = small_federation(rounds=2, participation=participation)  # digits over 3 clients, in process
    return experiment.model_copy(
        update={"resources": experiment.resources.model_copy(update={"client_batch": batch, **resources})}
    )


@pytest.mark.parametrize(("participation", "per_round"), [(1.0, 3), (0.67, 2), (0.34, 1)], ids=["all", "two", "one"])
def test_a_client_batch_above_the_clients_a_round_trains_resolves_to_them_silently(capsys, participation, per_round):
    experiment = _experiment(8, participation)
    data = prepare_data(experiment)
    assert clients_per_round(participation, data.num_clients) == experiment.clients_per_round() == per_round
    assert client_batch(experiment, data, "fedavg", MODEL) == per_round
    assert client_batch(_experiment(per_round, participation), data, "fedavg", MODEL) == per_round  # not capped
    assert capsys.readouterr().err == ""  # the command warned once, before Ray; no trial repeats it


def test_auto_is_capped_at_the_clients_a_round_trains_too():
    gpu = {"gpus_per_actor": 1, "device": "cuda"}  # auto batches only where the clients train on a GPU
    experiment = _experiment("auto", 0.67, **gpu)
    assert client_batch(experiment, prepare_data(experiment), "fedavg", MODEL) == 2  # 8x8 digits: all 3 would fit


def test_the_capped_client_batch_trains_exactly_as_the_one_given():
    """client_batch 8, capped at the 2 of 3 clients a round samples, and 2 itself: the same round, metrics and
    weights, bit for bit (one round: a batched round costs seconds on the CPU)."""
    runs = []
    for batch in (8, 2):
        rows: list[dict] = []
        experiment = _experiment(batch, 0.67).model_copy(update={"rounds": 1})
        federation = Federation(experiment, "fedprox", {"mu": 0.01})
        federation.run(rows.append)
        runs.append((untimed([row.to_result() for row in rows]), federation.weights))
    (rows_8, weights_8), (rows_2, weights_2) = runs
    np.testing.assert_equal(rows_8, rows_2)  # NaN (an unlogged metric) equal to NaN
    assert weights_8.keys() == weights_2.keys()
    for key in weights_8:
        np.testing.assert_array_equal(weights_8[key], weights_2[key], err_msg=key)
