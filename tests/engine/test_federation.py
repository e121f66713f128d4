"""The round driver: data preparation, client sampling, determinism in-process and on Ray actors."""

from __future__ import annotations

import numpy as np
import pytest
import ray
import torch

from raytune_fl.config import ExperimentConfig, ResourcesConfig
from raytune_fl.engine.data import FederatedData, prepare_data
from raytune_fl.engine.federation import Federation, NoLocalStepError
from raytune_fl.engine.synchronous import sample_clients
from tests.support.rounds import learning as _learning

EXPERIMENT = ExperimentConfig.model_validate(
    {
        "dataset": "digits",
        "partition": {"kind": "dirichlet", "alpha": 0.3, "clients": 4, "min_size": 20, "seed": 1},
        "rounds": 2,
        "batch_size": 32,
        "resources": {"actors": 2, "cpus_per_actor": 1},
    }
)


def test_client_train_and_validation_parts_are_disjoint_and_complete():
    data = prepare_data(EXPERIMENT)
    everything = np.concatenate(data.train_parts + data.val_parts)
    assert len(everything) == len(np.unique(everything)) == len(data.dataset.y_train)
    for train, val in zip(data.train_parts, data.val_parts):
        assert len(val) == round(0.1 * (len(train) + len(val)))
    assert np.array_equal(data.val_indices, np.sort(np.concatenate(data.val_parts)))


def test_client_sampling_is_seeded_and_sized():
    picks = [sample_clients(100, 0.1, seed=3, round_index=r) for r in (1, 2)]
    assert all(len(p) == 10 and p == sorted(set(p)) for p in picks)
    assert picks[0] != picks[1]
    assert sample_clients(100, 0.1, seed=3, round_index=1) == picks[0]
    assert sample_clients(10, 1.0, seed=0, round_index=5) == list(range(10))
    assert sample_clients(10, 0.01, seed=0, round_index=1).__len__() == 1  # at least one client


def _run(experiment: ExperimentConfig, method: str, params: dict, pool_factory=None) -> list[dict]:
    rows: list[dict] = []
    kwargs = {} if pool_factory is None else {"pool_factory": pool_factory}
    Federation(experiment, method, params, **kwargs).run(rows.append)
    return [_learning(row) for row in rows]


def test_same_seed_gives_identical_round_metrics(one_thread):
    first = _run(EXPERIMENT, "univarfl", {"mu": 0.5})
    second = _run(EXPERIMENT, "univarfl", {"mu": 0.5})
    assert first == second
    assert [row["round"] for row in first] == [1, 2]
    assert {
        "val_acc",
        "val_loss",
        "test_acc",
        "test_loss",
        "train_loss",
        "train_ce",
        "term_variance",
        "term_energy",
    } <= set(first[0])
    other_seed = _run(EXPERIMENT.model_copy(update={"seed": 1}), "univarfl", {"mu": 0.5})
    assert other_seed != first


def test_partial_participation_trains_the_sampled_clients_only(one_thread):
    experiment = EXPERIMENT.model_copy(update={"participation": 0.5})
    rows = _run(experiment, "fedavg", {})
    assert [row["clients"] for row in rows] == [2, 2]


def test_ray_actors_give_the_in_process_metrics(ray_cluster, one_thread):
    from raytune_fl.actors import ray_pool_factory

    local = _run(EXPERIMENT, "feduv", {})
    on_actors = _run(EXPERIMENT, "feduv", {}, pool_factory=ray_pool_factory(EXPERIMENT.resources))
    assert on_actors == local  # order of replies does not matter: aggregation sorts by client
    again = _run(EXPERIMENT, "feduv", {}, pool_factory=ray_pool_factory(ResourcesConfig(actors=1)))
    assert again == local  # nor does the number of actors


def test_a_closed_trial_pool_parks_its_actors_and_the_next_trial_reuses_them(ray_cluster, one_thread):
    from ray.exceptions import RayActorError

    from raytune_fl.actors import ray_pool_factory
    from raytune_fl.actors.client import ActorCache

    resources, cache = ResourcesConfig(actors=1), ActorCache()
    fresh = _run(EXPERIMENT, "fedprox", {"mu": 0.1}, pool_factory=ray_pool_factory(resources))
    assert cache.parked is None  # without a cache (outside a trial) a closed pool kills its actors
    try:
        _run(EXPERIMENT, "feduv", {}, pool_factory=ray_pool_factory(resources, cache=cache))
        parked = cache.parked.actors
        reused = _run(EXPERIMENT, "fedprox", {"mu": 0.1}, pool_factory=ray_pool_factory(resources, cache=cache))
        assert cache.parked.actors == parked  # the same actor trained the second trial
        assert reused == fresh  # and like a fresh one: nothing but the data carries over between trials
        other_data = EXPERIMENT.model_copy(update={"partition": EXPERIMENT.partition.model_copy(update={"seed": 2})})
        _run(other_data, "fedavg", {}, pool_factory=ray_pool_factory(resources, cache=cache))
        assert cache.parked.actors != parked
        with pytest.raises(RayActorError):  # other data: the parked actor was killed, its bundle freed
            ray.get(parked[0].ready.remote(), timeout=30)
    finally:
        assert cache.release_parked() == 1
    assert cache.parked is None


def test_a_trials_first_pool_takes_the_actors_its_trial_started_early(ray_cluster, one_thread):
    from ray.exceptions import RayActorError

    from raytune_fl.actors import ray_pool_factory
    from raytune_fl.actors.client import ActorCache

    resources, cache = ResourcesConfig(actors=1), ActorCache()
    local = _run(EXPERIMENT, "fedprox", {"mu": 0.1})
    try:
        cache.start_early(resources)  # what a trial does first (tune/trainable.py), before it imports torch
        early = list(cache.early.actors)
        cache.start_early(resources)
        assert cache.early.actors == early  # started once
        rows = _run(EXPERIMENT, "fedprox", {"mu": 0.1}, pool_factory=ray_pool_factory(resources, cache=cache))
        assert rows == local  # loaded and configured after they started: the same run
        assert cache.early is None and cache.parked.actors == early  # the pool took them, then parked them
        cache.start_early(resources)
        assert cache.early is None  # actors are parked here: the next trial's pool reuses those
        cache.release_parked()
        cache.start_early(ResourcesConfig(actors=1, device="cpu"))  # started for other resources
        other = list(cache.early.actors)
        _run(EXPERIMENT, "fedprox", {"mu": 0.1}, pool_factory=ray_pool_factory(resources, cache=cache))
        assert cache.early is None and cache.parked.actors != other
        with pytest.raises(RayActorError):  # not taken: killed, their bundles freed
            ray.get(other[0].ready.remote(), timeout=30)
    finally:
        cache.release_parked()


def _plain_nchw_rounds(experiment: ExperimentConfig, method: str, params: dict) -> list[tuple[float, float, float]]:
    """The synchronous round written out plainly, as the engine ran before channels-last and overlapped rounds:
    NCHW tensors, the sampled clients one after another, aggregate, then evaluate. (val_loss, val_acc, train_loss)."""
    from raytune_fl.engine.evaluation import evaluate
    from raytune_fl.engine.federation import worker_spec
    from raytune_fl.engine.worker import ClientWorker
    from raytune_fl.methods import build_method
    from raytune_fl.weights import load_weights, read_weights

    data = prepare_data(experiment)
    spec = worker_spec(experiment, data, method, params)
    worker = ClientWorker(spec, data.dataset.x_train, data.dataset.y_train, data.train_parts)
    server = build_method(method, params, spec.method_context(data.num_clients))
    torch.manual_seed(experiment.seed)
    model = spec.model.build()
    weights = read_weights(model)
    val = data.val_indices
    val_x, val_y = torch.from_numpy(data.dataset.x_train[val]), torch.from_numpy(data.dataset.y_train[val])
    rows = []
    for round_index in range(1, experiment.rounds + 1):
        clients = sample_clients(data.num_clients, experiment.participation, experiment.seed, round_index)
        updates = [worker.train(c, round_index, weights, server.aggregator.payload()) for c in clients]
        weights = server.aggregate(weights, updates)
        load_weights(model, weights)
        val_loss, val_acc = evaluate(model, val_x, val_y, experiment.eval_batch_size)
        total = sum(u.num_samples for u in updates)
        rows.append((val_loss, val_acc, sum(u.metrics["loss"] * u.num_samples for u in updates) / total))
    return rows


def test_channels_last_off_is_the_plain_nchw_round(ray_cluster, one_thread):
    """Pinned within one run, not against floats recorded on another CPU: BLAS and oneDNN pick kernels by
    instruction set (on AVX2 this run's first val_loss is 2.303748539, on AVX-512 2.303748508), and NHWC differs
    from NCHW by less than that in round 1, so no cross-machine tolerance could tell the two apart."""
    from raytune_fl.actors import ray_pool_factory
    from raytune_fl.engine.worker import ModelSpec

    def conv(model: torch.nn.Module) -> torch.nn.Conv2d:  # one whose two layouts differ: >1 input channel, 3x3
        return next(
            m for m in model.modules() if isinstance(m, torch.nn.Conv2d) and m.in_channels > 1 and m.kernel_size[0] > 1
        )

    # the switch itself: off, the model and its inputs stay NCHW (the very tensors, not converted copies)
    x = torch.randn(2, 1, 8, 8)
    plain = ModelSpec("simple_cnn", 1, 10, (8, 8), channels_last=False)
    assert plain.images(x) is x and conv(plain.build()).weight.is_contiguous()
    nhwc = ModelSpec("simple_cnn", 1, 10, (8, 8), channels_last=True)
    weight = conv(nhwc.build()).weight
    assert weight.is_contiguous(memory_format=torch.channels_last) and not weight.is_contiguous()
    assert nhwc.images(x).is_contiguous(memory_format=torch.channels_last)

    experiment = ExperimentConfig.model_validate(
        {
            "dataset": "digits",
            "partition": {"kind": "dirichlet", "alpha": 0.5, "clients": 4, "min_size": 20},
            "rounds": 3,
            "batch_size": 32,
            "resources": {"actors": 0, "channels_last": False},
        }
    )
    rows = _run(experiment, "fedprox", {"mu": 0.01})
    # same machine, same run: exact. The engine's overlapped schedule is the plain sequential round ...
    assert [(r["val_loss"], r["val_acc"], r["train_loss"]) for r in rows] == _plain_nchw_rounds(
        experiment, "fedprox", {"mu": 0.01}
    )
    # ... in process and on actors alike
    actors = experiment.model_copy(update={"resources": ResourcesConfig(actors=2, channels_last=False)})
    assert _run(actors, "fedprox", {"mu": 0.01}, pool_factory=ray_pool_factory(actors.resources)) == rows
    # NHWC sums in another order (BatchNorm's NHWC kernel in float32): round 1 agrees to rounding, then drifts
    nhwc_rows = _run(experiment.model_copy(update={"resources": ResourcesConfig(actors=0)}), "fedprox", {"mu": 0.01})
    assert nhwc_rows[0]["val_loss"] == pytest.approx(rows[0]["val_loss"], rel=1e-4) and nhwc_rows != rows


def test_a_round_that_never_finishes_times_out(ray_cluster):
    from raytune_fl.actors import RayActorPool
    from raytune_fl.engine.federation import worker_spec

    data = prepare_data(EXPERIMENT)
    spec = worker_spec(EXPERIMENT, data, "fedavg", {})
    # a GPU the local cluster does not have: the actors can never be placed, the driver must not hang
    pool = RayActorPool(data, spec, ResourcesConfig(actors=1, gpus_per_actor=1, round_timeout_s=2))
    try:
        with pytest.raises(TimeoutError, match="did not start within 2s"):
            pool.ready()
    finally:
        pool.close()


def _tiny_clients(experiment: ExperimentConfig) -> FederatedData:
    """Two clients of 10 training samples each, made by hand: check_steps (prepare_data) would refuse them."""
    dataset = prepare_data(EXPERIMENT).dataset
    return FederatedData(dataset, [np.arange(0, 10), np.arange(10, 20)], [np.arange(20, 25), np.arange(25, 30)])


def test_a_round_in_which_no_client_took_a_step_fails_instead_of_reporting_a_zero_loss(one_thread):
    experiment = EXPERIMENT.model_copy(update={"rounds": 1, "drop_last": True})  # 10 samples, batch 32: no step
    rows: list = []
    with pytest.raises(NoLocalStepError) as error:
        Federation(experiment, "fedavg", {}, data=_tiny_clients(experiment)).run(rows.append)
    assert str(error.value).startswith(
        "round 1: none of the 2 clients that reported took a local step (training samples client 0: 10, client 1: "
        "10; base.batch_size 32, base.drop_last true): nothing trained"
    )
    assert rows == []  # no round was reported, train_loss 0.0 least of all
    # the same clients without drop_last take one step of 10 each: the round trains and reports its loss
    kept = EXPERIMENT.model_copy(update={"rounds": 1})
    Federation(kept, "fedavg", {}, data=_tiny_clients(kept)).run(rows.append)
    assert len(rows) == 1 and rows[0]["train_loss"] > 0
