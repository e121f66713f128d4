"""A trial whose loss turns NaN/Inf stops itself, is tagged diverged, and the study goes on."""

from __future__ import annotations

import math

from raytune_fl.config import ExperimentConfig
from raytune_fl.engine.federation import Federation
from raytune_fl.privacy import GaussianSteps, epsilon
from tests.support import run_study, tiny_space


def _diverged_rows(**changes) -> list[dict]:
    """The reports of a run whose proximal pull overshoots (FedProx, mu 1e6): NaN in round 1."""
    experiment = ExperimentConfig(
        dataset="digits",
        partition={"kind": "dirichlet", "alpha": 0.5, "clients": 3, "min_size": 20},
        rounds=3,
        batch_size=32,
        resources={"actors": 0},
        **changes,
    )
    rows: list[dict] = []
    Federation(experiment, "fedprox", {"mu": 1e6}).run(rows.append)
    return rows


def test_a_diverged_run_reports_once_with_the_worst_score():
    rows = _diverged_rows()
    assert len(rows) == 1
    row = rows[0]
    assert row["diverged"] == 1.0 and row["round"] == 1
    assert row["val_acc"] == 0.0 and math.isinf(row["val_loss"])
    assert "non-finite local loss" in row["divergence"]


def test_a_diverged_run_reports_every_objective_a_study_may_select_on_at_its_worst_and_the_budget_spent():
    # several objectives: Tune's searcher requires each one in every result, a diverged trial's included
    [row] = _diverged_rows(privacy={"mechanism": "central", "noise_multiplier": 1.0})
    assert row["client_acc_worst"] == row["client_acc_mean"] == row["client_acc_bottom10"] == 0.0
    assert (row["client_acc_std"], row["client_acc_var"]) == (0.5, 0.25)  # the largest spread of accuracies
    assert row["epsilon"] == epsilon([GaussianSteps(1.0, 1.0, 1)], 1e-5)  # round 1's noise was spent
    assert row["personal_val_acc"] == 0.0  # its clients' own models, as every method reports them
    from raytune_fl.config.space import OBJECTIVES

    assert set(OBJECTIVES) - set(row) <= {"round_time_s"}, set(OBJECTIVES) - set(row)


def test_a_study_marks_diverged_trials_and_carries_on(ray_cluster, tmp_path):
    data = tiny_space("diverging")
    data["base"].update(rounds=2, resources={"actors": 0, "cpus_per_actor": 1})
    data["variants"] = {
        "prox": {"method": "fedprox", "search": {"mu": {"choice": [0.01, 1000000.0]}}},
        "fedavg": {"method": "fedavg"},
    }
    data["tune"].update(num_samples=4, scheduler={"asha": None})
    _, runs = run_study(tmp_path, data)
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    prox = [r for r in children if r.data.tags["variant"] == "prox"]
    status = {float(r.data.params["mu"]): r.data.tags["trial_status"] for r in prox}
    assert status == {0.01: "finished", 1e6: "diverged"}  # TPE tried both values; the study went on
    diverged = [r for r in prox if r.data.tags["trial_status"] == "diverged"]
    assert all("non-finite" in r.data.tags["divergence"] and r.info.status == "FINISHED" for r in diverged)
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags and r.data.tags["variant"] == "prox")
    assert parent.data.tags["best.mu"] == "0.01"  # never chosen: a diverged trial's score is the worst
    assert parent.data.metrics["trials_diverged"] == len(diverged) >= 1
    assert any(r.data.tags["variant"] == "fedavg" and r.data.tags["trial_status"] == "finished" for r in children)
