"""Client batching on the Ray actor pool (actors/pool.py): an actor trains a chunk of a round's clients at once, the
chunks are those the in-process pool forms, a lost chunk is retried as one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from raytune_fl.actors import ray_pool_factory
from raytune_fl.actors.pool import RayActorPool
from raytune_fl.aggregators.partial import fedavg_of_sums
from raytune_fl.config import ExperimentConfig, FaultsConfig
from raytune_fl.engine.data import prepare_data
from raytune_fl.engine.federation import CLIENT_LOG_KEY, Federation, worker_spec
from raytune_fl.engine.pool import ClientLost, InProcessPool, TrainJob, WorkerFailure, client_batches
from raytune_fl.engine.worker import ClientWorker
from raytune_fl.methods import build_method
from raytune_fl.types import ClientUpdate
from raytune_fl.weights import read_weights
from tests.support.rounds import learning as _learning

# a Ray cluster and four federations: the slow tier (CI runs it)

METHOD = "scaffold"  # a payload (the server's control variate) and per-client state both travel with a chunk
EXPERIMENT = ExperimentConfig.model_validate(
    {
        "dataset": "digits",
        "partition": {"kind": "dirichlet", "alpha": 0.3, "clients": 4, "min_size": 20, "seed": 1},
        "rounds": 2,
        "batch_size": 32,
        "model": "simple_cnn",
        "resources": {"actors": 2, "cpus_per_actor": 1, "client_batch": 2, "round_timeout_s": 120},
        "diagnostics": {"spectrum": False, "every": 0},
    }
)
KILLED_ROUND, LOST_ROUND = 2, 3  # rounds whose first chunk's actor dies: retried, then (retries 0) lost
KILLED_SUM_ROUND = 4  # a round of partial sums whose first actor's share dies: retried whole


@pytest.fixture(scope="module")
def setting():
    data = prepare_data(EXPERIMENT)
    spec = worker_spec(EXPERIMENT, data, METHOD, {})
    assert spec.client_batch == 2
    server = build_method(METHOD, {}, spec.method_context(data.num_clients))
    torch.manual_seed(0)
    weights = read_weights(spec.model.build())
    return data, spec, weights, server.aggregator.payload()


def _jobs(setting, round_index: int) -> list[TrainJob]:
    data, _, weights, payload = setting
    return [TrainJob(c, round_index, weights, payload) for c in range(data.num_clients)]


def _first_chunk(setting, round_index: int) -> list[int]:
    data, spec, _, _ = setting
    sizes = [len(part) for part in data.train_parts]
    return client_batches(_jobs(setting, round_index), sizes, spec.client_batch, workers=2)[0]


def test_a_federation_on_actors_with_client_batching_gives_the_in_process_rounds(ray_cluster, one_thread):
    # first in this file: its pool's actors are gone before `ray_pool` takes the cluster's two CPUs
    def run(**kwargs) -> list[dict]:
        rows: list[dict] = []
        Federation(EXPERIMENT, METHOD, {}, **kwargs).run(rows.append)
        return rows

    on_actors = run(pool_factory=ray_pool_factory(EXPERIMENT.resources))
    assert [_learning(row) for row in on_actors] == [_learning(row) for row in run()]
    for row in on_actors:  # each round: two chunks of two clients, each trained by one actor
        actors = [entry["actor"] for entry in row[CLIENT_LOG_KEY]]
        assert sorted(actors.count(actor) for actor in set(actors)) == [2, 2]


@pytest.fixture(scope="module")
def ray_pool(ray_cluster, setting):
    data, spec, _, _ = setting
    kills = [(r, _first_chunk(setting, r)[0]) for r in (KILLED_ROUND, LOST_ROUND, KILLED_SUM_ROUND)]
    pool = RayActorPool(data, spec, EXPERIMENT.resources, FaultsConfig(retries=1, inject_kills=kills))
    pool.ready()
    yield pool
    pool.close()


def _in_process(setting, round_index: int) -> dict[int, ClientUpdate]:
    data, spec, _, _ = setting
    pool = InProcessPool(ClientWorker(spec, data.dataset.x_train, data.dataset.y_train, data.train_parts))
    assert not pool.worker.sequential_reason  # the method's clients do train stacked
    jobs = _jobs(setting, round_index)
    outcomes = pool.collect(pool.submit_all(jobs))
    return {o.client_id: o for o in outcomes.values()}


def _on_actors(pool: RayActorPool, setting, round_index: int) -> dict[int, ClientUpdate | ClientLost]:
    outcomes = pool.collect(pool.submit_all(_jobs(setting, round_index)))
    return {o.client_id: o for o in outcomes.values()}


def _assert_same(ray_updates: dict, local: dict) -> None:
    assert ray_updates.keys() == local.keys()
    for client_id, update in ray_updates.items():
        other = local[client_id]
        assert isinstance(update, ClientUpdate)
        assert (update.num_steps, update.num_samples, update.metrics) == (
            other.num_steps,
            other.num_samples,
            other.metrics,
        )
        assert update.delta.keys() == other.delta.keys()
        assert all(np.array_equal(update.delta[k], other.delta[k]) for k in update.delta)
        assert all(np.array_equal(update.buffers[k], other.buffers[k]) for k in update.buffers)


def test_actors_train_the_in_process_chunks_bit_for_bit(ray_pool, setting, one_thread):
    tickets = ray_pool.submit_all(_jobs(setting, 1))
    # two idle actors, four clients: each actor got one chunk of two (min(2, ceil(4 / 2)))
    assert sorted(len(f.jobs) for f in ray_pool.in_flight.values()) == [2, 2] and not ray_pool.queue
    outcomes = ray_pool.collect(tickets)
    on_actors = {o.client_id: o for o in outcomes.values()}
    _assert_same(on_actors, _in_process(setting, 1))
    chunk = _first_chunk(setting, 1)
    assert on_actors[chunk[0]].place.actor == on_actors[chunk[1]].place.actor  # trained together, on one actor
    assert ray_pool.drain_failures() == []


def test_partial_sums_come_back_one_message_per_actor_with_the_in_process_sum(ray_pool, setting, one_thread):
    data, spec, weights, _ = setting
    replies = ray_pool.replies
    outcomes = ray_pool.collect(ray_pool.submit_all(_jobs(setting, 1), summed=True))
    assert ray_pool.replies - replies == 2  # two actors: two messages for the four clients
    on_actors = sorted(outcomes.values(), key=lambda u: u.client_id)
    assert all(isinstance(u, ClientUpdate) and u.delta == {} for u in on_actors)
    assert len({id(u.summed) for u in on_actors}) == 2  # each actor's clients share its one sum
    worker = ClientWorker(spec, data.dataset.x_train, data.dataset.y_train, data.train_parts)
    local = worker.train_summed(_jobs(setting, 1))  # one worker: one sum of all four
    assert [(u.client_id, u.metrics, u.num_steps) for u in on_actors] == [
        (u.client_id, u.metrics, u.num_steps) for u in sorted(local, key=lambda u: u.client_id)
    ]
    for name, value in fedavg_of_sums(weights, local, False).items():  # two float64 sums added, or one
        np.testing.assert_allclose(fedavg_of_sums(weights, on_actors, False)[name], value, rtol=1e-6, atol=1e-9)


def test_a_share_of_partial_sums_whose_actor_dies_is_retried_whole(ray_pool, setting, one_thread):
    data, spec, weights, _ = setting
    outcomes = ray_pool.collect(ray_pool.submit_all(_jobs(setting, KILLED_SUM_ROUND), summed=True))
    failures = ray_pool.drain_failures()
    # the share of two clients (one chunk per actor: the same as client_batch 2's) was lost once, then trained again
    assert sorted(f.client_id for f in failures) == sorted(_first_chunk(setting, KILLED_SUM_ROUND))
    on_actors = list(outcomes.values())
    assert all(isinstance(u, ClientUpdate) for u in on_actors) and len({id(u.summed) for u in on_actors}) == 2
    worker = ClientWorker(spec, data.dataset.x_train, data.dataset.y_train, data.train_parts)
    local = worker.train_summed(_jobs(setting, KILLED_SUM_ROUND))
    for name, value in fedavg_of_sums(weights, local, False).items():  # nothing of the lost attempt is in the sum
        np.testing.assert_allclose(fedavg_of_sums(weights, on_actors, False)[name], value, rtol=1e-6, atol=1e-9)


def test_a_chunk_whose_actor_dies_is_retried_whole(ray_pool, setting, one_thread):
    on_actors = _on_actors(ray_pool, setting, KILLED_ROUND)
    _assert_same(on_actors, _in_process(setting, KILLED_ROUND))  # the retried chunk trains as the lost one would
    chunk = _first_chunk(setting, KILLED_ROUND)
    failures = ray_pool.drain_failures()
    assert sorted(f.client_id for f in failures) == sorted(chunk)  # one per client of the chunk
    assert all(f == WorkerFailure(KILLED_ROUND, f.client_id, 0, f.error) and f.error for f in failures)
    assert ray_pool.refs == {}  # nothing queued or in flight: no weights kept in the object store


def test_a_chunk_past_its_retries_comes_back_lost_client_by_client(ray_pool, setting):
    ray_pool.retries = 0
    try:
        on_actors = _on_actors(ray_pool, setting, LOST_ROUND)
    finally:
        ray_pool.retries = 1
    chunk = _first_chunk(setting, LOST_ROUND)
    assert {c for c, o in on_actors.items() if isinstance(o, ClientLost)} == set(chunk)
    assert all(on_actors[c].attempts == 1 for c in chunk)
    assert all(isinstance(o, ClientUpdate) for c, o in on_actors.items() if c not in chunk)
    assert len(ray_pool.drain_failures()) == len(chunk)
