"""`eval_every`: the server evaluates every k rounds, the first and the last; the rounds between report training
figures only, Tune still sees the tuned metric in each result, and MLflow logs the scores of evaluated rounds only."""

from __future__ import annotations

import numpy as np

from raytune_fl.config import ExperimentConfig
from raytune_fl.engine.federation import Federation
from raytune_fl.engine.report import RoundReport, carry_evaluation, evaluated_only
from raytune_fl.metrics import CARRIED_KEY, ROUND, TEST_ACC, TRAIN_LOSS, VAL_ACC, VAL_LOSS
from tests.support import run_study, tiny_space


def _experiment(**changes) -> ExperimentConfig:
    base = {
        "dataset": "digits",
        "partition": {"kind": "dirichlet", "alpha": 0.5, "clients": 3, "min_size": 20},
        "rounds": 5,
        "batch_size": 32,
        "resources": {"actors": 0},
        "diagnostics": {"every": 0},
    }
    return ExperimentConfig.model_validate({**base, **changes})


def test_evaluated_rounds_are_every_kth_and_the_last():
    experiment = _experiment(rounds=7, eval_every=3)
    assert [r for r in range(1, 8) if experiment.evaluates(r)] == [3, 6, 7]
    assert all(_experiment().evaluates(r) for r in range(1, 6))  # the default: every round


def test_a_round_between_evaluations_carries_the_last_scores_for_tune_only():
    last = {VAL_ACC: 0.5, VAL_LOSS: 1.25, TRAIN_LOSS: 2.0}
    between = {ROUND: 3, TRAIN_LOSS: 1.5}
    carried = carry_evaluation(between, last)
    # the round's own train_loss stays; the scores come from the evaluated round, and are named as carried
    assert carried == {ROUND: 3, TRAIN_LOSS: 1.5, VAL_ACC: 0.5, VAL_LOSS: 1.25, CARRIED_KEY: [VAL_ACC, VAL_LOSS]}
    assert evaluated_only(carried) == between  # what the driver logs: the round's own figures
    assert evaluated_only(between) == between  # an evaluated round passes as it is
    assert carry_evaluation(between, None) == between  # nothing evaluated yet: nothing to carry


def test_the_rounds_between_evaluations_train_exactly_as_when_every_round_is_evaluated(one_thread):
    every: list[RoundReport] = []
    sparse: list[RoundReport] = []
    federations = []
    for eval_every, rows in ((1, every), (2, sparse)):
        federation = Federation(_experiment(eval_every=eval_every), "fedavg", {})
        federation.run(rows.append)
        federations.append(federation)
    assert [r.evaluated for r in sparse] == [True, True, False, True, True]  # rounds 1 (the first), 2, 4, 5
    assert VAL_ACC not in sparse[2] and TEST_ACC not in sparse[2]
    for a, b in zip(every, sparse, strict=True):  # evaluation never touches training: same losses, same scores
        assert a[TRAIN_LOSS] == b[TRAIN_LOSS]
        if b.evaluated:
            assert (a[VAL_ACC], a[TEST_ACC]) == (b[VAL_ACC], b[TEST_ACC])
    for name, value in federations[0].weights.items():
        np.testing.assert_array_equal(value, federations[1].weights[name])


def test_a_study_between_evaluations_runs_asha_and_logs_only_evaluated_scores(ray_cluster, tmp_path):
    data = tiny_space("sparse_eval", rounds=5, eval_every=2)
    data["base"]["resources"] = {"actors": 0, "cpus_per_actor": 1}
    data["variants"] = {"fedprox": {"method": "fedprox", "search": {"mu": {"loguniform": [0.001, 0.1]}}}}
    data["tune"].update(num_samples=2)  # TPE (Optuna) and ASHA both read val_acc from every result
    client, runs = run_study(tmp_path, data)
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert children and all(r.data.tags["trial_status"] in ("finished", "stopped") for r in children)
    for child in children:
        scored = [m.step for m in client.get_metric_history(child.info.run_id, VAL_ACC)]
        trained = [m.step for m in client.get_metric_history(child.info.run_id, TRAIN_LOSS)]
        assert scored == [r for r in trained if r in (1, 2, 4, 5)]  # never a carried score
        assert len(trained) >= 2
