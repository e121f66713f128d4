"""Client actors die (os._exit mid-round, ray.kill between rounds): the trial survives, nothing changes."""

from __future__ import annotations

import numpy as np
import pytest

from raytune_fl.actors import ray_pool_factory
from raytune_fl.config import ExperimentConfig, FaultsConfig
from raytune_fl.engine.federation import CLIENT_LOG_KEY, Federation
from tests.support import run_study, tiny_space


def _experiment(**faults) -> ExperimentConfig:
    return ExperimentConfig(
        dataset="digits",
        partition={"kind": "dirichlet", "alpha": 0.5, "clients": 3, "min_size": 20},
        rounds=3,
        batch_size=32,
        resources={"actors": 2, "cpus_per_actor": 1, "round_timeout_s": 120},
        diagnostics={"spectrum": False, "every": 0},
        faults=faults,
    )


def _run(
    experiment: ExperimentConfig, on_pool=None, on_round=None, method: str = "scaffold", params: dict | None = None
) -> tuple[list[dict], Federation]:
    made = ray_pool_factory(experiment.resources, experiment.faults)

    def factory(data, spec):
        pool = made(data, spec)
        if on_pool:
            on_pool(pool)
        return pool

    rows: list[dict] = []
    # SCAFFOLD by default: per-client and server state
    federation = Federation(experiment, method, params or {}, pool_factory=factory)

    def record(metrics: dict) -> None:
        rows.append(metrics)
        if on_round:
            on_round(metrics)

    federation.run(record)
    return rows, federation


def _learning(rows: list[dict]) -> list[tuple]:
    return [(r["val_loss"], r["val_acc"], r["train_loss"], r["clients"]) for r in rows]


def _same_states(a: Federation, b: Federation) -> bool:
    return a.client_states.keys() == b.client_states.keys() and all(
        np.array_equal(a.client_states[c]["scaffold"][k], b.client_states[c]["scaffold"][k])
        for c in a.client_states
        for k in a.client_states[c]["scaffold"]
    )


@pytest.fixture(scope="module")
def clean(ray_cluster) -> tuple[list[dict], Federation]:
    return _run(_experiment())


def test_actors_killed_mid_round_are_replaced_and_their_clients_retried(clean):
    clean, clean_fed = clean
    kills = [(1, 0), (2, 1), (2, 2), (3, 0)]
    faulted, faulted_fed = _run(_experiment(inject_kills=kills))
    # a retried client trains from the same job on a fresh actor: the run is the fault-free run, bit for bit
    assert _learning(faulted) == _learning(clean)
    assert _same_states(faulted_fed, clean_fed)
    assert [r["actor_failures"] for r in faulted] == [1, 2, 1]
    assert faulted[-1]["actor_failures_total"] == len(kills)
    assert all(r["clients_lost"] == 0 for r in faulted)


def test_a_client_past_its_retries_is_left_out_of_that_round_only(ray_cluster):
    rows, federation = _run(_experiment(retries=0, inject_kills=[(2, 1)]))
    assert [r["clients"] for r in rows] == [3, 2, 3]
    assert [r["clients_lost"] for r in rows] == [0, 1, 0]
    assert {e["client"]: e["status"] for e in rows[1][CLIENT_LOG_KEY]} == {0: "trained", 1: "lost", 2: "trained"}
    assert set(federation.client_states) == {0, 1, 2}  # its state from round 1 carried it through to round 3


def test_an_actor_killed_between_rounds_is_replaced(ray_cluster, clean):
    pools = []

    def kill_both(metrics: dict) -> None:
        if metrics["round"] == 1:
            for actor in pools[0].actors:
                ray_cluster.kill(actor)

    rows, _ = _run(_experiment(), on_pool=pools.append, on_round=kill_both)
    assert _learning(rows) == _learning(clean[0])
    # round 2 already trains while round 1 is reported: an actor that finished its round-2 jobs before the kill
    # is found dead in round 3, so the failures fall in round 2 or 3, never round 1, and both are found
    assert rows[0]["actor_failures"] == 0 and rows[-1]["actor_failures_total"] >= 2
    assert rows[1]["actor_failures"] >= 1 and all(r["clients_lost"] == 0 for r in rows)


def test_a_study_survives_injected_kills_and_says_so_in_mlflow(ray_cluster, tmp_path):
    data = tiny_space("chaos")
    data["base"]["rounds"] = 2
    data["base"]["faults"] = {"inject_kills": [[1, 0], [2, 1], [2, 2]]}
    data["variants"] = {"fedavg": {"method": "fedavg"}}
    client, runs = run_study(tmp_path, data)
    child = next(r for r in runs if "mlflow.parentRunId" in r.data.tags)
    assert child.info.status == "FINISHED" and child.data.tags["trial_status"] == "finished"
    assert child.data.tags["actor_failures"] == "3"
    assert [m.value for m in client.get_metric_history(child.info.run_id, "actor_failures")] == [1.0, 2.0]
    assert all(r.info.status == "FINISHED" for r in runs)


def test_fedbuff_runs_on_the_same_actors_and_survives_kills(ray_cluster):
    experiment = _experiment().model_copy(update={"rounds": 4, "participation": 0.67})  # 2 in flight
    experiment = experiment.model_copy(update={"system": experiment.system.model_copy(update={"speed_sigma": 1.0})})
    clean, _ = _run(experiment, method="fedbuff", params={"buffer_size": 1})
    trained = [(e["round"], e["client"]) for r in clean for e in r[CLIENT_LOG_KEY] if e["status"] == "trained"]
    kills = [trained[0], trained[-1]]  # jobs that do run: the first update, and one applied in the last round
    faulted_experiment = experiment.model_copy(update={"faults": FaultsConfig(inject_kills=kills)})
    faulted, _ = _run(faulted_experiment, method="fedbuff", params={"buffer_size": 1})
    assert _learning(faulted) == _learning(clean)
    # >= : asynchronously, one client may run several jobs for the same round (each one killed once)
    assert sum(r["actor_failures"] for r in faulted) >= len(kills)


def test_a_loss_that_diverges_on_an_actor_ends_the_run_with_its_reason(ray_cluster):
    rows, _ = _run(_experiment(), method="fedprox", params={"mu": 1e6})
    assert len(rows) == 1 and rows[0]["diverged"] == 1.0
    assert "NonFiniteLossError: non-finite local loss" in rows[0]["divergence"]
