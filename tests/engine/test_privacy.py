"""Differential privacy in the round driver (engine/privacy.py): central DP-FedAvg's server on hand values, the
epsilon a round reports against the accountant, the local ledger across a checkpoint, and short federations."""

from __future__ import annotations

import numpy as np
import pytest

from raytune_fl.config import ExperimentConfig
from raytune_fl.engine.federation import Federation
from raytune_fl.engine.privacy import CentralPrivacy, LocalLedger, central_noise, local_noise, mechanism_noise
from raytune_fl.methods import build_method
from raytune_fl.methods.base import MethodContext
from raytune_fl.metrics import DP_CLIPPED_FRACTION, DP_NOISE_MULTIPLIER, EPSILON
from raytune_fl.privacy import GaussianSteps, epsilon, local_plan
from raytune_fl.types import ClientUpdate


def _experiment(privacy: dict, **changes) -> ExperimentConfig:
    base = {
        "dataset": "digits",
        "partition": {"kind": "dirichlet", "alpha": 0.5, "clients": 4, "min_size": 20},
        "rounds": 3,
        "batch_size": 32,
        "participation": 0.5,
        "resources": {"actors": 0},
        "diagnostics": {"every": 0},
        "privacy": privacy,
    }
    return ExperimentConfig.model_validate({**base, **changes})


def _update(client: int, w: list[float], var: list[float]) -> ClientUpdate:
    delta = {"w": np.array(w, dtype=np.float32), "bn.running_var": np.array(var, dtype=np.float32)}
    return ClientUpdate(client, num_samples=10 * (client + 1), num_steps=3, delta=delta, buffers={}, metrics={})


WEIGHTS = {
    "w": np.zeros(2, dtype=np.float32),
    "bn.running_var": np.ones(1, dtype=np.float32),
    "bn.num_batches_tracked": np.array(5),
}


def test_central_fedavg_adds_the_uniform_clipped_mean_over_the_expected_cohort_whatever_the_sample_counts():
    server = CentralPrivacy(_experiment({"clip_norm": 1.0}), noise=0.0, num_clients=4)  # q N = 0.5 x 4 = 2
    fedavg = build_method("fedavg", {}, MethodContext(num_classes=10))
    # norms: sqrt(9 + 16 + 0) = 5 (scaled by 1/5) and 0.5 (kept); client 1 has twice the samples: no weight
    updates = [_update(0, [3.0, 4.0], [0.0]), _update(1, [0.0, 0.0], [0.5])]
    new = server.aggregate(fedavg, WEIGHTS, updates, round_index=1)
    np.testing.assert_allclose(new["w"], [0.6 / 2, 0.8 / 2], rtol=1e-6)
    np.testing.assert_allclose(new["bn.running_var"], [1.0 + 0.5 / 2], rtol=1e-6)
    assert new["bn.num_batches_tracked"] == 5  # the server's own count: no client's is read
    assert server.round_metrics(1, updates)[DP_CLIPPED_FRACTION] == 0.5


def test_a_round_that_drew_nobody_still_moves_the_model_by_the_noise_and_replays_it():
    experiment = _experiment({"clip_norm": 1.0, "noise_multiplier": 1.0})
    fedavg = build_method("fedavg", {}, MethodContext(num_classes=10))
    one = CentralPrivacy(experiment, 1.0, 4).aggregate(fedavg, WEIGHTS, [], round_index=2)
    two = CentralPrivacy(experiment, 1.0, 4).aggregate(fedavg, WEIGHTS, [], round_index=2)
    assert not np.array_equal(one["w"], WEIGHTS["w"])
    np.testing.assert_array_equal(one["w"], two["w"])


def test_noise_that_pushes_a_running_variance_below_zero_is_cut_at_zero():
    server = CentralPrivacy(_experiment({"clip_norm": 10.0}), noise=0.0, num_clients=4)
    fedavg = build_method("fedavg", {}, MethodContext(num_classes=10))
    new = server.aggregate(fedavg, WEIGHTS, [_update(0, [0.0, 0.0], [-6.0])], round_index=1)  # 1 - 6 / 2 < 0
    assert new["bn.running_var"][0] == 0.0


def test_central_epsilon_is_the_accountants_after_the_rounds_run():
    experiment = _experiment({"noise_multiplier": 1.3})
    server = CentralPrivacy(experiment, 1.3, 4)
    metrics = server.round_metrics(3, [])
    assert metrics[EPSILON] == epsilon([GaussianSteps(1.3, 0.5, 3)], 1e-5)
    assert metrics[DP_NOISE_MULTIPLIER] == 1.3 and DP_CLIPPED_FRACTION not in metrics


def test_a_target_epsilon_derives_the_noise_that_spends_it_over_the_planned_rounds():
    privacy = _experiment({"target_epsilon": 4.0}).privacy
    sigma = central_noise(privacy, participation=0.5, rounds=3)
    assert epsilon([GaussianSteps(sigma, 0.5, 3)], 1e-5) == pytest.approx(4.0, rel=0.01)
    assert epsilon([GaussianSteps(sigma, 0.5, 3)], 1e-5) <= 4.0
    assert central_noise(_experiment({}).privacy, 0.5, 3) == 1.0  # unset: 1.0


def test_local_noise_for_a_target_keeps_every_client_within_it_the_neediest_deciding():
    privacy = _experiment({"mechanism": "local", "target_epsilon": 3.0}).privacy
    sizes = [40, 400, 90]
    sigma = local_noise(privacy, sizes, batch_size=32, local_epochs=1, rounds=3)
    spent = []
    for n in sizes:
        plan = local_plan(n, 32, 1)
        spent.append(epsilon([GaussianSteps(sigma, plan.sample_rate, 3 * plan.steps_per_round)], 1e-5))
    assert max(spent) == pytest.approx(3.0, rel=0.01) and max(spent) <= 3.0


def test_the_local_plan_by_hand():
    assert local_plan(100, 32, 2) == local_plan(100, 32, 2)
    plan = local_plan(100, 32, 2)
    assert (plan.sample_rate, plan.steps_per_round, plan.expected_batch) == (0.32, 8, 32.0)  # 2 x ceil(100/32)
    small = local_plan(10, 64, 1)
    assert (small.sample_rate, small.steps_per_round, small.expected_batch) == (1.0, 1, 10.0)


def test_the_local_ledger_counts_each_clients_steps_reports_the_worst_and_survives_a_checkpoint():
    experiment = _experiment({"mechanism": "local", "noise_multiplier": 1.1})
    sizes = [40, 400, 90, 60]
    ledger = LocalLedger(experiment, 1.1, sizes)
    ledger.record([_update(0, [0, 0], [0]), _update(2, [0, 0], [0])])
    ledger.record([_update(0, [0, 0], [0])])
    assert ledger.steps == {0: 6, 2: 3}
    worst = max(
        epsilon([GaussianSteps(1.1, local_plan(40, 32, 1).sample_rate, 6)], 1e-5),
        epsilon([GaussianSteps(1.1, local_plan(90, 32, 1).sample_rate, 3)], 1e-5),
    )
    assert ledger.round_metrics(2, [])[EPSILON] == worst
    restored = LocalLedger(experiment, 1.1, sizes)
    restored.load_state_dict(ledger.state_dict())
    assert restored.steps == ledger.steps and restored.round_metrics(2, [])[EPSILON] == worst


def test_mechanism_noise_reads_the_mechanism():
    central = _experiment({"mechanism": "central", "noise_multiplier": 0.7})
    assert mechanism_noise(central, [40, 50]) == 0.7


def test_a_central_federation_reports_the_accountants_epsilon_every_round_within_its_target(one_thread):
    rows = []
    Federation(_experiment({"target_epsilon": 6.0, "clip_norm": 0.5}), "fedavg", {}).run(rows.append)
    sigma = rows[0][DP_NOISE_MULTIPLIER]
    assert [r[EPSILON] for r in rows] == [epsilon([GaussianSteps(sigma, 0.5, r)], 1e-5) for r in (1, 2, 3)]
    assert rows[-1][EPSILON] <= 6.0


def test_a_central_federation_resumed_from_its_checkpoint_ends_with_the_same_model(one_thread):
    # two rounds, a checkpoint, a fresh federation for the third: sampling and noise are keyed by (seed, round)
    experiment = _experiment({"noise_multiplier": 0.8, "clip_norm": 0.5})
    whole = Federation(experiment, "fedavg", {})
    whole.run(lambda report: None)
    first = Federation(experiment, "fedavg", {})
    first.experiment = experiment.model_copy(update={"rounds": 2})  # the run stops after round 2
    first.run(lambda report: None)
    resumed = Federation(experiment, "fedavg", {})
    resumed.load_state_dict(first.state_dict())
    resumed.run(lambda report: None)
    for name, value in whole.weights.items():
        np.testing.assert_array_equal(value, resumed.weights[name])
