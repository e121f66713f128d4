"""System heterogeneity (dropout, step budgets, speeds, deadline) and FedBuff: seeded, recorded, by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from raytune_fl.aggregators.fedbuff import fedbuff, staleness_weight
from raytune_fl.config import ConfigError, ExperimentConfig, SystemConfig, parse_space
from raytune_fl.engine.fedbuff import rebase_statistics
from raytune_fl.engine.federation import CLIENT_LOG_KEY, Federation
from raytune_fl.engine.local import LocalData, LocalSettings, train_local
from raytune_fl.engine.system import SystemModel, client_speeds, epoch_steps
from raytune_fl.methods import build_method
from raytune_fl.models import build_model
from raytune_fl.types import ClientUpdate
from tests.support import tiny_space


def _experiment(rounds: int = 3, clients: int = 4, **system) -> ExperimentConfig:
    return ExperimentConfig(
        dataset="digits",
        partition={"kind": "dirichlet", "alpha": 0.5, "clients": clients, "min_size": 20},
        rounds=rounds,
        batch_size=32,
        resources={"actors": 0},
        diagnostics={"spectrum": False, "every": 0},
        system=system,
    )


def _run(experiment: ExperimentConfig, method: str = "fedavg", params: dict | None = None) -> list[dict]:
    rows: list[dict] = []
    Federation(experiment, method, params or {}).run(rows.append)
    return rows


def _untimed(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if not k.endswith("_s")} for row in rows]


def test_epoch_steps_skip_a_last_batch_of_one():
    assert epoch_steps(64, 32, 1) == 2
    assert epoch_steps(65, 32, 1) == 2  # 32 + 32 + 1: the single sample is skipped
    assert epoch_steps(66, 32, 2) == 6  # 32 + 32 + 2, twice
    assert epoch_steps(1, 32, 1) == 0


def test_speeds_are_fixed_per_client_and_lognormal():
    assert np.array_equal(client_speeds(5, 0.0, 0), np.ones(5))
    speeds = client_speeds(20_000, 0.5, 3)
    assert np.array_equal(speeds, client_speeds(20_000, 0.5, 3))
    assert np.median(speeds) == pytest.approx(1.0, abs=0.03)
    assert np.std(np.log(speeds)) == pytest.approx(0.5, abs=0.02)


def test_a_plan_is_seeded_by_stream_and_follows_its_settings():
    sizes = [100, 40, 64, 7]
    model = SystemModel(SystemConfig(dropout=0.5, local_steps=(2, 5)), sizes, 32, 1, seed=1)
    plans = model.plan(range(4), stream=7)
    assert plans == model.plan(range(4), stream=7)
    assert all(2 <= p.steps <= 5 and p.max_steps == p.steps for p in plans)
    many = [p for s in range(200) for p in model.plan(range(4), stream=s)]
    assert np.mean([p.dropped for p in many]) == pytest.approx(0.5, abs=0.05)
    assert {p.steps for p in many} == {2, 3, 4, 5}
    # without a step budget: local_epochs over the client's data; unit speed -> simulated time = steps
    plain = SystemModel(SystemConfig(), sizes, 32, 1, seed=1).plan(range(4), stream=1)
    expected = [(4, None, 4.0), (2, None, 2.0), (2, None, 2.0), (1, None, 1.0)]
    assert [(p.steps, p.max_steps, p.sim_time) for p in plain] == expected


def test_the_deadline_marks_late_clients_and_bounds_the_round():
    model = SystemModel(SystemConfig(deadline=2.5), [100, 40, 64], 32, 1, seed=0)
    plans = model.plan([0, 1, 2], stream=1)
    assert [p.status for p in plans] == ["late", "trained", "trained"]  # 4 steps > 2.5; 2 and 2 in time
    assert model.round_duration(plans) == 2.5
    assert model.round_duration(plans[1:]) == 2.0


def test_a_step_budget_is_exact_across_passes():
    torch.manual_seed(0)
    model = build_model("simple_cnn", 1, 10, (8, 8))
    x, y = torch.randn(40, 1, 8, 8), torch.randint(0, 10, (40,))
    settings = LocalSettings(epochs=1, batch_size=16, lr=0.01, momentum=0.0, weight_decay=0.0)
    method, data = build_method("fedavg", {}, 10), LocalData(x, y, 10)
    assert train_local(model, method, data, settings, torch.Generator().manual_seed(0)).steps == 3
    assert train_local(model, method, data, settings, torch.Generator().manual_seed(0), max_steps=7).steps == 7
    assert train_local(model, method, data, settings, torch.Generator().manual_seed(0), max_steps=2).steps == 2


def test_dropouts_lateness_and_budgets_are_recorded_and_reproducible():
    experiment = _experiment(dropout=0.3, local_steps=(1, 4), speed_sigma=0.8, deadline=3.0)
    first, second = _run(experiment), _run(experiment)
    assert [r["val_loss"] for r in first] == [r["val_loss"] for r in second]
    for row in first:
        log = row[CLIENT_LOG_KEY]
        statuses = [entry["status"] for entry in log]
        assert row["clients_sampled"] == len(log) == 4
        assert row["clients"] == statuses.count("trained")
        assert row["clients_dropped"] == statuses.count("dropped")
        assert row["clients_late"] == statuses.count("late")
        assert all(1 <= entry["steps"] <= 4 for entry in log)
        assert all(entry["sim_time"] > 3.0 for entry in log if entry["status"] == "late")
    assert sum(r["clients_dropped"] for r in first) > 0 and sum(r["clients_late"] for r in first) > 0
    assert [r["sim_time"] for r in first] == pytest.approx([3.0 * (i + 1) for i in range(len(first))], abs=3.0)


def test_a_round_nobody_reports_leaves_the_model_unchanged():
    rows = _run(_experiment(rounds=2, deadline=0.5))  # every client needs at least one step: all late
    assert [r["clients"] for r in rows] == [0, 0]
    assert rows[0]["val_loss"] == rows[1]["val_loss"]
    assert "train_loss" not in rows[0]


def test_fedbuff_by_hand_with_staleness_weights_and_plain_batchnorm_statistics():
    weights = {"w": np.array([1.0, 1.0]), "bn.running_var": np.array([1.0]), "bn.num_batches_tracked": np.array(3)}

    def update(cid: int, delta: float, var: float, staleness: int) -> ClientUpdate:
        return ClientUpdate(
            cid,
            num_samples=10 * (cid + 1),  # FedBuff ignores sample counts
            num_steps=1,
            delta={"w": np.array([delta, -delta]), "bn.running_var": np.array([var])},
            buffers={"bn.num_batches_tracked": np.array(5 + cid)},
            metrics={},
            staleness=staleness,
        )

    assert staleness_weight(3, 0.5) == 0.5 and staleness_weight(3, 0.0) == 1.0
    new = fedbuff(weights, [update(1, 4.0, 0.2, 3), update(0, 2.0, 0.4, 0)], server_lr=2.0, staleness_exponent=0.5)
    # w + 2 * (1 * 2 + 0.5 * 4) / 2 = w + 4 (and -4); running_var: plain mean of deltas, no server_lr
    assert np.allclose(new["w"], [5.0, -3.0])
    assert np.allclose(new["bn.running_var"], [1.3])
    assert int(new["bn.num_batches_tracked"]) == 5  # the lowest client id's counter


def test_a_stale_update_keeps_its_client_statistics_not_its_variance_delta():
    start = {"bn.running_var": np.array([4.0]), "w": np.array([0.0])}
    current = {"bn.running_var": np.array([1.0]), "w": np.array([9.0])}
    update = ClientUpdate(0, 1, 1, {"bn.running_var": np.array([-3.0]), "w": np.array([2.0])}, {}, {}, staleness=2)
    rebased = rebase_statistics(update, start, current)
    # the client ended at variance 4 - 3 = 1; against the current model that is a delta of 0 (not -3: negative)
    assert rebased.delta["bn.running_var"][0] == 0.0 and rebased.delta["w"][0] == 2.0
    fresh = ClientUpdate(0, 1, 1, {"bn.running_var": np.array([-3.0])}, {}, {}, staleness=0)
    assert rebase_statistics(fresh, start, current) is fresh


def test_fedbuff_runs_asynchronously_with_recorded_staleness():
    experiment = _experiment(rounds=4, clients=5, speed_sigma=1.0, local_steps=(1, 3))
    experiment = experiment.model_copy(update={"participation": 0.6})  # 3 clients in flight
    rows = _run(experiment, "fedbuff", {"buffer_size": 2})
    # simulated time: the same schedule, staleness and metrics on every run
    assert _untimed(rows) == _untimed(_run(experiment, "fedbuff", {"buffer_size": 2}))
    assert [r["round"] for r in rows] == [1, 2, 3, 4] and all(r["clients"] == 2 for r in rows)
    assert max(r["staleness_max"] for r in rows) >= 1
    times = [r["sim_time"] for r in rows]
    assert times == sorted(times)
    for row in rows:
        trained = [e for e in row[CLIENT_LOG_KEY] if e["status"] == "trained"]
        assert row["staleness_mean"] == pytest.approx(np.mean([e["staleness"] for e in trained]))


def test_fedbuff_with_a_round_deadline_is_refused():
    bad = tiny_space()
    bad["base"]["system"] = {"deadline": 5.0}
    bad["variants"] = {"buffered": {"method": "fedbuff"}}
    with pytest.raises(ConfigError, match=r"system.deadline.*FedBuff"):
        parse_space(bad)
