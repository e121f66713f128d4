"""Training-protocol knobs: the per-round learning-rate schedule and drop_last (issue: the papers' protocols)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from raytune_fl.aggregators.fedavg import fedavg, plain_mean_statistics
from raytune_fl.config import ConfigError, ExperimentConfig, ScheduleConfig, TrialSpec, parse_space
from raytune_fl.engine.data import prepare_data
from raytune_fl.engine.federation import CLIENT_LOG_KEY, Federation, worker_spec
from raytune_fl.engine.lr_schedule import LrSchedule
from raytune_fl.engine.system import epoch_steps
from raytune_fl.engine.worker import ClientWorker
from raytune_fl.tracking.records import trial_params
from raytune_fl.types import ClientUpdate
from tests.support.workload import WORKLOAD_SIZES

# ------------------------------------------------------------------------------------------------ the schedule


def test_cosine_by_hand_at_rounds_1_10_20():
    cosine = LrSchedule.of(ScheduleConfig(kind="cosine"), 20)  # t_max unset: the run's rounds
    assert cosine.t_max == 20 and cosine.eta_min == 0.0
    assert cosine.lr(0.01, 1) == 0.01  # round 1 trains at the base rate
    # 0.01 * (1 + cos(9 pi / 20)) / 2, cos(81 degrees) = 0.156434465
    assert cosine.lr(0.01, 10) == pytest.approx(0.005782172325, rel=1e-9)
    # 0.01 * (1 + cos(19 pi / 20)) / 2, cos(171 degrees) = -0.987688341
    assert cosine.lr(0.01, 20) == pytest.approx(0.0000615582970, rel=1e-8)
    floor = LrSchedule.of(ScheduleConfig(kind="cosine", t_max=10, eta_min=0.001), 20)
    assert floor.lr(0.01, 11) == pytest.approx(0.001, abs=1e-15)  # t_max rounds after round 1: the floor


def test_cosine_is_torchs_scheduler_stepped_once_per_round():
    """FedUV's official code reads the rate, trains the round, then steps CosineAnnealingLR(T_max = rounds)."""
    rounds = 20
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.01)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=rounds)
    ours = LrSchedule.of(ScheduleConfig(kind="cosine"), rounds)
    for round_index in range(1, rounds + 1):
        assert ours.lr(0.01, round_index) == pytest.approx(scheduler.get_last_lr()[0], rel=1e-12, abs=1e-15)
        optimizer.step()
        scheduler.step()


def test_step_and_exponential_by_hand():
    step = LrSchedule.of(ScheduleConfig(kind="step", step_size=5), 20)
    assert step.gamma == 0.1  # torch's StepLR default
    assert [step.lr(0.1, r) for r in (1, 5, 6, 10, 11)] == pytest.approx([0.1, 0.1, 0.01, 0.01, 0.001])
    exponential = LrSchedule.of(ScheduleConfig(kind="exponential", gamma=0.5), 20)
    assert [exponential.lr(0.08, r) for r in (1, 2, 3, 4)] == [0.08, 0.04, 0.02, 0.01]
    assert LrSchedule().lr(0.03, 17) == 0.03  # constant


def _refused(schedule: dict) -> str:
    space = {"name": "t", "base": {"optimizer": {"schedule": schedule}}, "variants": {"a": {"method": "fedavg"}}}
    with pytest.raises(ConfigError) as refused:
        parse_space(space)
    return str(refused.value)


def test_schedule_settings_are_checked_and_name_their_field():
    assert "base.optimizer.schedule" in _refused({"kind": "exponential"})
    assert "gamma: an exponential schedule needs its factor per round" in _refused({"kind": "exponential"})
    assert "base.optimizer.schedule.kind" in _refused({"kind": "linear"})
    assert "base.optimizer.schedule.t_max" in _refused({"kind": "cosine", "t_max": 0})


def test_the_knobs_are_logged_as_params():
    experiment = ExperimentConfig(drop_last=True, optimizer={"schedule": {"kind": "cosine"}})
    params = trial_params(TrialSpec.resolve(experiment, "fedavg", {}))
    assert params["optimizer.schedule.kind"] == "cosine" and params["drop_last"] is True
    assert params["optimizer.schedule.t_max"] is None  # unset: the run's rounds, as the YAML says it


def _client_update(experiment: ExperimentConfig, round_index: int):
    data = prepare_data(experiment)
    spec = worker_spec(experiment, data, "fedavg", {})
    worker = ClientWorker(spec, data.dataset.x_train, data.dataset.y_train, data.train_parts)
    torch.manual_seed(0)
    weights = {k: v.detach().numpy().copy() for k, v in spec.model.build().state_dict().items()}
    return worker.train(3, round_index, weights)


def test_a_client_trains_at_its_rounds_rate():
    """Round 10 of a cosine run is, bit for bit, round 10 of a constant run at that round's rate."""
    base = ExperimentConfig(rounds=20, resources={"channels_last": False})
    scheduled = base.model_copy(
        update={"optimizer": base.optimizer.model_copy(update={"schedule": ScheduleConfig(kind="cosine")})}
    )
    rate = LrSchedule.of(scheduled.optimizer.schedule, 20).lr(0.01, 10)
    constant = base.model_copy(update={"optimizer": base.optimizer.model_copy(update={"lr": rate})})
    got, want, first = _client_update(scheduled, 10), _client_update(constant, 10), _client_update(base, 10)
    for key, value in want.delta.items():
        assert (got.delta[key] == value).all(), key
    assert any((got.delta[k] != first.delta[k]).any() for k in got.delta)  # and not the base rate's update


def test_q_ffl_refuses_a_schedule():
    experiment = ExperimentConfig(optimizer={"schedule": {"kind": "cosine"}}, resources={"actors": 0})
    with pytest.raises(ValueError, match="q-FFL's step L = 1/lr needs one client rate"):
        Federation(experiment, "qffl", {})


# ------------------------------------------------------------------------------------------------ drop_last


def test_drop_last_step_counts_on_the_workload_clients():
    # batch 64: a last batch of one sample is always skipped (none of these sizes leaves one)
    assert [epoch_steps(n, 64, 1) for n in WORKLOAD_SIZES] == [5, 6, 18, 2, 7, 5, 14, 2, 9, 2]
    assert [epoch_steps(n, 64, 1, drop_last=True) for n in WORKLOAD_SIZES] == [4, 5, 17, 1, 6, 4, 13, 1, 8, 1]
    assert epoch_steps(65, 32, 2, drop_last=True) == 4 and epoch_steps(31, 32, 1, drop_last=True) == 0


@pytest.mark.parametrize("drop_last", [False, True])
def test_the_loop_takes_the_steps_it_is_told(drop_last):
    """One round of the workload in-process: each client's recorded optimiser steps are the hand counts."""
    experiment = ExperimentConfig(
        rounds=1,
        drop_last=drop_last,
        partition={"val_fraction": 0.0},  # docs/explanation/workload.md's clients: every training sample
        resources={"actors": 0},
        diagnostics={"every": 0, "spectrum": False, "client_accuracy": False},
    )
    rows: list[dict] = []
    Federation(experiment, "fedavg", {}).run(rows.append)
    steps = [r["steps"] for r in sorted(rows[-1][CLIENT_LOG_KEY], key=lambda r: r["client"])]
    assert steps == [epoch_steps(n, 64, 1, drop_last) for n in WORKLOAD_SIZES]
    assert math.isfinite(rows[-1]["test_acc"]) and "diverged" not in rows[-1]
    assert math.isnan(rows[-1]["val_acc"]) and math.isnan(rows[-1]["val_loss"])  # no validation split: no score


# ------------------------------------------------------------------------------------------------ BatchNorm


def _update(client_id: int, n: int, mean: list[float], weight: float) -> ClientUpdate:
    delta = {"bn.running_mean": np.array(mean, np.float32), "fc.weight": np.array([weight], np.float32)}
    return ClientUpdate(client_id, n, 1, delta, {}, {})


def test_plain_mean_statistics_by_hand():
    start = {"bn.running_mean": np.zeros(2, np.float32), "fc.weight": np.array([1.0], np.float32)}
    updates = [_update(1, 3, [3.0, 6.0], 0.3), _update(0, 1, [1.0, 2.0], 0.1)]
    weighted = fedavg(start, updates)
    np.testing.assert_array_equal(weighted["bn.running_mean"], [2.5, 5.0])  # (1 * [1, 2] + 3 * [3, 6]) / 4
    plain = plain_mean_statistics(start, weighted, updates)
    np.testing.assert_array_equal(plain["bn.running_mean"], [2.0, 4.0])  # ([1, 2] + [3, 6]) / 2
    assert plain["fc.weight"] is weighted["fc.weight"]  # parameters stay the method's: 1 + (0.1 + 0.9) / 4


def _one_round(**batchnorm) -> dict:
    experiment = ExperimentConfig(
        rounds=1,
        batchnorm=batchnorm,
        resources={"actors": 0, "channels_last": False},
        diagnostics={"every": 0, "spectrum": False, "client_accuracy": False},
    )
    federation = Federation(experiment, "fedavg", {})
    federation.run(lambda row: None)
    return federation.weights


def test_batchnorm_mean_changes_the_statistics_only():
    weighted, plain = _one_round(), _one_round(aggregate="mean")
    for key, value in weighted.items():
        same = np.array_equal(value, plain[key])
        assert same != key.endswith(("running_mean", "running_var")), key


def _worker(experiment: ExperimentConfig) -> tuple[ClientWorker, dict]:
    data = prepare_data(experiment)
    spec = worker_spec(experiment, data, "fedavg", {})
    worker = ClientWorker(spec, data.dataset.x_train, data.dataset.y_train, data.train_parts)
    torch.manual_seed(0)
    return worker, {k: v.detach().numpy().copy() for k, v in spec.model.build().state_dict().items()}


def test_batchnorm_running_statistics_in_local_training_never_move():
    worker, weights = _worker(ExperimentConfig(batchnorm={"local_training": "running"}))
    update = worker.train(2, 1, weights)
    statistics = [k for k in update.delta if k.endswith(("running_mean", "running_var"))]
    assert statistics and all(not update.delta[k].any() for k in statistics)  # used, never updated
    assert all(not update.buffers[k].any() for k in update.buffers)  # num_batches_tracked stays 0
    assert update.delta["classifier.weight"].any()  # while the parameters train
    trained, _ = _worker(ExperimentConfig())
    assert trained.train(2, 1, weights).delta["encoder.1.running_mean"].any()  # the default updates them


def test_batchnorm_local_clients_resume_from_their_own_statistics():
    worker, weights = _worker(ExperimentConfig(batchnorm={"aggregate": "local"}))
    first = worker.train(3, 1, weights)
    own = first.state["bn_local_statistics"]
    assert set(own) == {k for k in first.delta if k.endswith(("running_mean", "running_var"))}
    for key, value in own.items():  # what the client ended with: the server's statistics plus its delta
        np.testing.assert_allclose(value, weights[key] + first.delta[key], rtol=0, atol=1e-6)
    # round 2 from a server model whose statistics are not the client's: the client uses its own
    resumed = worker.train(3, 2, weights, state=first.state)
    by_hand, _ = _worker(ExperimentConfig())
    started_own = {k: own.get(k, v) for k, v in weights.items()}
    expected = by_hand.train(3, 2, started_own)
    for key, value in expected.delta.items():
        back = started_own[key] + value  # where the client ended, from its own start
        # the same end point; each side rounds once when its delta is taken and added back
        np.testing.assert_allclose(weights[key] + resumed.delta[key], back, rtol=0, atol=1e-6, err_msg=key)


# ------------------------------------------------------------------------------------------------ optimiser override


def test_a_variant_trains_with_its_own_optimiser_in_both_stages():
    from raytune_fl.ablation.plan import build_cells
    from raytune_fl.ablation.sources import VariantSource

    official = {"lr": 0.01, "momentum": 0.5, "weight_decay": 5e-4}
    space = parse_space(
        {
            "name": "t",
            "base": {"rounds": 2},
            "variants": {"fedavg": {"method": "fedavg"}, "fedld": {"method": "fedld", "optimizer": official}},
        }
    )
    assert space.experiment_for("fedavg") is space.base
    fedld = space.experiment_for("fedld")
    assert fedld.optimizer.momentum == 0.5 and fedld.optimizer.weight_decay == 5e-4 and fedld.rounds == 2
    logged = trial_params(TrialSpec.resolve(fedld, "fedld", {}))  # the run's params
    assert logged["optimizer.momentum"] == 0.5
    sources = {name: VariantSource(name, v.method, {}, None, "") for name, v in space.variants.items()}
    cells = build_cells(sources, {"-": space.base}, [0, 1], {"fedld": fedld.optimizer})
    momenta = {(c.variant, c.seed): c.experiment.optimizer.momentum for c in cells}
    assert momenta == {("fedavg", 0): 0.9, ("fedavg", 1): 0.9, ("fedld", 0): 0.5, ("fedld", 1): 0.5}
    with pytest.raises(ConfigError, match="variants.fedld.optimizer.momentum"):
        parse_space({"name": "t", "variants": {"fedld": {"method": "fedld", "optimizer": {"momentum": 2}}}})
