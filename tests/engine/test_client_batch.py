"""Client batching (resources.client_batch, engine/batched.py): K clients trained in one vectorised step equal the
sequential engine.

The conformance check runs in float64. Batched kernels sum in another order than one client's kernels, so float32
runs differ from the sequential loop in the last bits at first; a ReLU whose input sits within rounding of 0 (or
FedUV's median pair) then takes the other branch and the two runs part by ~lr * a gradient, which later rounds
amplify: two *sequential* float32 runs whose initial weights differ by 1e-7 relative part by up to 1e-2 in the
loss after two rounds on 8x8 digits. In float64 that rounding is ~1e-16 and no branch flips, so every number must
agree to 1e-9 relative: any real difference (a wrong batch, a step too many, a hook state swapped between
clients) is many orders of magnitude above it.
"""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch
from pydantic import ValidationError
from sklearn.datasets import load_digits

from raytune_fl.config import ExperimentConfig, ResourcesConfig
from raytune_fl.engine.augment import AugmentSpec
from raytune_fl.engine.batched import auto_client_batch, client_bytes, vectorisable
from raytune_fl.engine.data import prepare_data
from raytune_fl.engine.federation import EngineNotice, Federation, client_batch
from raytune_fl.engine.local import LocalSettings
from raytune_fl.engine.pool import InProcessPool, TrainJob, client_batches
from raytune_fl.engine.steps import client_steps, group_steps
from raytune_fl.engine.worker import ClientWorker, ModelSpec, WorkerSpec
from raytune_fl.methods import METHODS, build_method
from raytune_fl.types import ClientUpdate, Weights
from raytune_fl.weights import read_weights


@dataclass(frozen=True)
class Float64Model(ModelSpec):
    """The registered model in float64 (weights still travel as float32 numpy, as always)."""

    def build(self) -> torch.nn.Module:
        return super().build().double()

    def images(self, x: torch.Tensor) -> torch.Tensor:
        return super().images(x).double()


MODEL = Float64Model("simple_cnn", 1, 10, (8, 8))
SETTINGS = LocalSettings(epochs=1, batch_size=16, lr=0.05, momentum=0.9, weight_decay=1e-4)
# partial last batches (none of 2 samples: BatchNorm on 1x1 maps amplifies rounding ~300x a layer there), a client
# with one batch, one with none (a batch needs 2 samples)
SIZES = (70, 53, 23, 9, 1)


def _data() -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    digits = load_digits()
    x = ((digits.data / 16.0 - 0.3) / 0.4).astype(np.float32).reshape(-1, 1, 8, 8)
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(y))[: sum(SIZES)]
    return x, y, np.split(order, np.cumsum(SIZES)[:-1])


DATA = _data()
BATCHABLE = [name for name in METHODS.names() if not METHODS.get(name).sequential]


def _rounds(
    name: str, params: dict, batch: int, settings: LocalSettings, budgets: Any, restart: bool, device: str = "cpu"
) -> tuple[Weights, list, dict]:
    """Two rounds of every client through the in-process pool (its client batching); `restart`: the worker, server
    and client states go through a pickle round trip between the rounds, as a checkpoint restore does."""
    spec = WorkerSpec(MODEL, name, params, settings, seed=0, device=device, client_batch=batch)
    context = spec.method_context(len(SIZES), float(np.mean(SIZES)))
    server = build_method(name, params, context)
    torch.manual_seed(0)
    weights = read_weights(MODEL.build())
    pool = InProcessPool(ClientWorker(spec, *DATA))
    states: dict[int, Any] = {}
    metrics = []
    for round_index in (1, 2):
        if restart and round_index == 2:
            saved = pickle.dumps((server.aggregator.state_dict(), states, weights))
            server = build_method(name, params, context)
            aggregator_state, states, weights = pickle.loads(saved)
            server.aggregator.load_state_dict(aggregator_state)
            pool = InProcessPool(ClientWorker(spec, *DATA))
        payload = server.aggregator.payload()
        jobs = [
            TrainJob(c, round_index, weights, payload, states.get(c), None if budgets is None else budgets[c])
            for c in range(len(SIZES))
        ]
        tickets = [pool.submit(job) for job in jobs]
        outcomes = pool.collect(tickets)
        updates: list[ClientUpdate] = [outcomes[t] for t in tickets]  # type: ignore[misc]
        for update in updates:
            if update.state:
                states[update.client_id] = update.state
        weights = server.aggregate(weights, updates)
        metrics.append([(u.client_id, u.num_steps, u.metrics, u.delta, u.extras) for u in updates])
    return weights, metrics, states


def _close(a: Any, b: Any, where: str = "") -> None:
    """Equal to 1e-9 relative (numbers, arrays, and containers of them)."""
    if isinstance(a, dict):
        assert set(a) == set(b), where
        for key in a:
            _close(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _close(x, y, f"{where}[{i}]")
    elif isinstance(a, (int, float, np.ndarray, np.generic)):
        np.testing.assert_allclose(np.asarray(b, dtype=float), np.asarray(a, dtype=float), rtol=1e-9, atol=1e-12,
                                   err_msg=where)  # fmt: skip
    elif dataclasses.is_dataclass(a):
        _close(dataclasses.asdict(a), dataclasses.asdict(b), where)
    else:
        assert a == b, where


VARIANTS = {
    "plain": (SETTINGS, None),
    "augment": (dataclasses.replace(SETTINGS, augment=AugmentSpec(crop_padding=2, horizontal_flip=True)), None),
    "budgets": (SETTINGS, [3, 1, 5, 2, 1]),  # system heterogeneity: step budgets, reshuffling each pass
    "drop_last": (dataclasses.replace(SETTINGS, drop_last=True), None),
}


@pytest.mark.parametrize("name", BATCHABLE)
def test_batched_clients_equal_sequential_ones_through_a_checkpoint(name):
    sequential = _rounds(name, {}, 1, SETTINGS, None, restart=False)
    batched = _rounds(name, {}, 4, SETTINGS, None, restart=True)  # chunks of 4 and 1: a step's clients vary
    _close(sequential, batched, name)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (benchmarks/gpu.py runs it on a lent GPU)")
@pytest.mark.parametrize("name", ["fedavg", "fedprox", "scaffold", "feddyn", "feduv", "fedpac"])
def test_batched_clients_equal_sequential_ones_on_cuda(name):
    _close(_rounds(name, {}, 1, SETTINGS, None, False, "cuda"), _rounds(name, {}, 4, SETTINGS, None, True, "cuda"))


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_batched_clients_draw_the_sequential_batches(variant):
    settings, budgets = VARIANTS[variant]
    for name, params in (("fedavg", {}), ("feduv", {"fidelity": "official"}), ("fedprox", {"mu": 0.3})):
        _close(_rounds(name, params, 1, settings, budgets, False), _rounds(name, params, 5, settings, budgets, False))


# diagnostics.gradient_norms on both rounds: every client that trains is measured on its pass's first batch (more
# epochs would not do: two passes already part the loops by more than 1e-9 through summation order alone)
PROBED = dataclasses.replace(SETTINGS, probe_rounds=frozenset({1, 2}))


@pytest.mark.parametrize("name", ["univarfl", "feddyn", "fedprox"])  # terms; per-client term weights; a hook
def test_the_gradient_probe_on_batched_clients_equals_the_sequential_one(name):
    sequential = _rounds(name, {}, 1, PROBED, None, restart=False)
    batched = _rounds(name, {}, 4, PROBED, None, restart=False)
    for rounds in (sequential, batched):  # every client that trained was measured, on terms where it has any
        measured = [metrics for clients in rounds[1] for _, steps, metrics, _, _ in clients if steps]
        assert measured and all(m["grad_norm_total"] > 0 and m["grad_norm_ce"] > 0 for m in measured), name
        # the terms' gradients count in the total (FedDyn's are 0 at round 1's start); FedProx's pull is a hook
        assert any(m["grad_norm_total"] != m["grad_norm_ce"] for m in measured) == (name != "fedprox"), name
    _close(sequential, batched, name)


def test_the_gradient_probe_leaves_batched_training_unchanged_bit_for_bit():
    probed, plain = _rounds("univarfl", {}, 4, PROBED, None, False), _rounds("univarfl", {}, 4, SETTINGS, None, False)
    assert all(np.array_equal(probed[0][key], plain[0][key]) for key in plain[0])
    assert "grad_norm_ce" in probed[1][0][0][2] and "grad_norm_ce" not in plain[1][0][0][2]


def test_each_methods_declaration_matches_what_its_hooks_can_do():
    for name in METHODS.names():
        method = build_method(name, {}, 10)
        assert bool(METHODS.get(name).sequential) == bool(vectorisable(method)), name


def test_a_method_that_cannot_batch_trains_one_at_a_time_with_a_notice_its_caller_shows(capsys, recwarn):
    experiment = ExperimentConfig(dataset="digits", resources={"actors": 0, "client_batch": 4})
    data = prepare_data(experiment)
    model = ModelSpec("simple_cnn", 1, 10, (8, 8))
    with pytest.warns(EngineNotice) as notices:  # a warning: the engine itself writes nothing
        assert client_batch(experiment, data, "moon", model) == 1
    [notice] = [str(n.message) for n in notices]
    assert notice.startswith("resources.client_batch: moon trains its clients one at a time (") and "\n" not in notice
    assert notices[0].filename == __file__  # stacklevel 2: it names the call that resolved the batch, here this test
    assert capsys.readouterr().err == ""
    recwarn.clear()
    assert client_batch(experiment, data, "fedprox", model) == 4
    assert not [w for w in recwarn if issubclass(w.category, EngineNotice)] and capsys.readouterr().err == ""


def test_the_batch_plan_groups_a_step_by_batch_size_and_offsets_rows_per_client():
    settings = LocalSettings(epochs=1, batch_size=3, lr=0.1, momentum=0.0, weight_decay=0.0)
    # client 0: 5 samples -> batches of 3 and 2; client 1: 4 samples -> 3 and 1 (a batch of one is skipped)
    generators = [torch.Generator().manual_seed(s) for s in (0, 1)]
    schedules = [client_steps(n, settings, g, 1, None) for n, g in zip((5, 4), generators)]
    plan = group_steps(schedules, starts=[0, 5], device=torch.device("cpu"))
    assert [[(g.clients, g.size) for g in step] for step in plan] == [[((0, 1), 3)], [((0,), 2)]]
    order0 = torch.randperm(5, generator=torch.Generator().manual_seed(0))
    order1 = torch.randperm(4, generator=torch.Generator().manual_seed(1))
    assert plan[0][0].rows.tolist() == [order0[:3].tolist(), (order1[:3] + 5).tolist()]
    assert plan[1][0].rows.tolist() == [order0[3:].tolist()]


def test_chunks_are_largest_clients_first_and_spread_over_the_workers():
    jobs = [TrainJob(c, 1, {}, {}) for c in range(5)]
    sizes = [10, 50, 30, 20, 40]
    assert client_batches(jobs, sizes, client_batch=4, workers=1) == [[1, 4, 2, 3], [0]]
    assert client_batches(jobs, sizes, client_batch=4, workers=2) == [[1, 4, 2], [3, 0]]  # ceil(5 / 2) = 3
    assert client_batches(jobs, sizes, client_batch=1, workers=1) == [[1], [4], [2], [3], [0]]


class _Pair(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)  # 15 parameters: 60 bytes

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.linear(x), x


def test_auto_client_batch_fits_the_memory_budget():
    # 4 x 60 bytes of parameters + 2 x (12 bytes of output) x batch 10 = 480 bytes a client
    assert client_bytes(_Pair(), torch.zeros(4), batch_size=10) == 480
    assert auto_client_batch(_Pair(), torch.zeros(4), 10, memory_gb=4800 / 2**30, clients=100) == 10
    assert auto_client_batch(_Pair(), torch.zeros(4), 10, memory_gb=4800 / 2**30, clients=3) == 3
    assert auto_client_batch(_Pair(), torch.zeros(4), 10, memory_gb=1e-9, clients=3) == 1


def test_auto_batches_only_where_the_clients_train_on_a_gpu():
    data = prepare_data(ExperimentConfig(dataset="digits"))
    model = ModelSpec("simple_cnn", 1, 10, (8, 8))
    on_cpu = ExperimentConfig(dataset="digits", resources={"actors": 0, "client_batch": "auto"})
    on_gpu = ExperimentConfig(
        dataset="digits", resources={"actors": 0, "gpus_per_actor": 1, "client_batch": "auto", "device": "cuda"}
    )
    assert client_batch(on_cpu, data, "fedavg", model) == 1
    assert client_batch(on_gpu, data, "fedavg", model) == data.num_clients  # 8x8 digits: all fit in 4 GiB


def test_client_batch_must_be_positive_or_auto():
    assert ResourcesConfig(client_batch="auto").client_batch == "auto"
    with pytest.raises(ValidationError, match="client_batch"):
        ResourcesConfig(client_batch=0)
    with pytest.raises(ValidationError, match="client_batch"):
        ResourcesConfig(client_batch="many")


def test_a_float32_run_with_batched_clients_learns_as_the_sequential_one():
    """The real engine in float32: the same steps and sample counts; accuracy and loss inside the float32 noise
    the module docstring describes (measured gap on this setting: ~1e-3)."""
    runs = {}
    for batch in (1, 4):
        experiment = ExperimentConfig.model_validate(
            {
                "dataset": "digits",
                "partition": {"kind": "dirichlet", "alpha": 0.3, "clients": 4, "min_size": 20, "seed": 1},
                "rounds": 2,
                "batch_size": 32,
                "resources": {"actors": 0, "client_batch": batch},
            }
        )
        rows: list[dict] = []
        Federation(experiment, "fedavg", {}).run(rows.append)
        runs[batch] = rows
    for one, four in zip(runs[1], runs[4]):
        assert [r["steps"] for r in one["client_log"]] == [r["steps"] for r in four["client_log"]]
        assert abs(one["val_acc"] - four["val_acc"]) <= 0.05
        assert abs(one["train_loss"] - four["train_loss"]) <= 0.05 * one["train_loss"]
