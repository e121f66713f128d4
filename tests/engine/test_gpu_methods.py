"""Every registered method trains on CUDA as on the CPU: two rounds in-process (`Federation(..., device=...)`) from the
same seed on a tiny federation, compared round by round (validation and test loss and accuracy, the training loss and
every other logged number) and by the final weights.

A second CUDA test checks that a method's per-step code never makes the host wait for the GPU (torch's sync debug
mode). The CUDA tests are skipped without CUDA; on a GPU machine: `python -m pytest -q tests/engine/test_gpu_methods.py`
(22 s for the whole file on an H200). What they catch: a tensor made on the wrong device (a crash), a per-client or
server state that goes astray on the device, a random stream or a batch order that depends on the device, a term
computed differently on the device, a `.item()` or a boolean mask in a step. The CPU tests at the end run anywhere:
they check the run-and-compare code itself (a seed replays bit for bit on the CPU, the comparison sees a real
difference).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from raytune_fl.config import ExperimentConfig
from raytune_fl.engine.data import FederatedData, prepare_data
from raytune_fl.engine.federation import CLIENT_LOG_KEY, Federation, in_process_pool
from raytune_fl.engine.pool import InProcessPool
from raytune_fl.engine.sgd import PlainSGD
from raytune_fl.engine.worker import WorkerSpec
from raytune_fl.methods import METHODS, Method
from raytune_fl.methods.base import Batch, ClientContext
from raytune_fl.types import Weights, WorkerPlace, is_float_entry
from raytune_fl.weights import load_weights, numpy_copy

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

# Small enough to be quick: 3 clients, 48 training samples each (2 steps of 24 a round), 2 rounds, the default SGD
# (lr 0.01, momentum 0.9). Not smaller batches or a larger rate: this 8-layer CNN on 8x8 digits has BatchNorm
# channels of almost no batch variance, which amplify rounding chaotically (a 1e-7 relative nudge of the initial
# weights moved some methods' updates by 20% with batches of 16 at lr 0.05); at this setting the same nudge moves
# the losses by at most 5e-5 and the model's update by at most 9e-4 (relative), over every case below.
EXPERIMENT = ExperimentConfig.model_validate(
    {
        "dataset": "digits",
        "partition": {"kind": "dirichlet", "alpha": 0.5, "clients": 3, "min_size": 20, "seed": 0},
        "rounds": 2,
        "local_epochs": 1,
        "batch_size": 24,
        "optimizer": {"lr": 0.01, "momentum": 0.9},
        "resources": {"actors": 0},
        "checkpoint_every": 0,
    }
)
TRAIN_PER_CLIENT = 48
VAL_PER_CLIENT = 24
TEST_SAMPLES = 360

# The methods at their defaults, and the non-default paths with device-specific code of their own.
CASES: list[tuple[str, dict[str, Any]]] = [(name, {}) for name in METHODS.names()] + [
    ("feduv", {"fidelity": "official"}),  # the median kept in the graph over non-zero distances (sync-free on GPU)
    ("feduv", {"sigma": 1.0}),  # a fixed RBF bandwidth
]
CASE_IDS = [name + "".join(f"-{v}" for v in params.values()) for name, params in CASES]

# Tolerances, CUDA against CPU (TF32 off, see the fixture). Same seed, same batches, same augmentation (drawn on the
# CPU generator on both), so the two runs differ only in the order in which kernels sum: about 1e-7 relative per
# float32 operation, which training amplifies (above: up to 5e-5 on the losses and 9e-4 on the update for a 1e-7
# nudge). Measured on an H200 (torch 2.11, CUDA 13): at most 1.3e-7 on the losses and 9.4e-5 on the update (freeze
# and scaffold; 2.5e-7 for every other case). The bounds leave ten times the nudge's worst, and stay below what a
# fault gives: with the CPU alone, SCAFFOLD's correction left out moves the losses by 3%, MOON without its previous
# model and FedDyn without its lambda_k move their logged terms from 0.69 to 0 and from 0.07 to 0.003.
LOSS_RTOL = 1e-3  # losses, terms and every other logged number: relative ...
LOSS_ATOL = 1e-5  # ... plus absolute, for values that are differences of losses (FedLD's decomposition) or near 0
# The model's update (final minus initial weights, every float entry together), in norm, relative to its norm. Taken
# over the whole model, not per entry: a single tensor can carry most of the chaos above (the first convolution,
# whose gradient passes every BatchNorm), or barely move (a bias that BatchNorm cancels: weight decay alone).
UPDATE_RTOL = 1e-2
WEIGHT_ATOL = 1e-6  # ... plus this much of the weights' own norm (their float32 rounding, a few ulps)
ACC_SAMPLES = 2  # accuracies: a prediction that sits on a near tie may flip; within this many samples of the set


@functools.cache
def tiny_data() -> FederatedData:
    """EXPERIMENT's federation, cut to TRAIN_PER_CLIENT training and VAL_PER_CLIENT held-out samples per client."""
    data = prepare_data(EXPERIMENT)
    dataset = data.dataset
    dataset = dataclasses.replace(dataset, x_test=dataset.x_test[:TEST_SAMPLES], y_test=dataset.y_test[:TEST_SAMPLES])
    return FederatedData(
        dataset,
        [part[:TRAIN_PER_CLIENT] for part in data.train_parts],
        [part[:VAL_PER_CLIENT] for part in data.val_parts],
    )


@dataclasses.dataclass(frozen=True)
class Run:
    rows: list[dict[str, Any]]  # each round's logged numbers, without timings and places
    initial: Weights
    final: Weights


def train(method: str, params: Mapping[str, Any], device: str, experiment: ExperimentConfig = EXPERIMENT) -> Run:
    rows: list[dict[str, Any]] = []
    federation = Federation(experiment, method, dict(params), data=tiny_data(), device=device)
    initial = {k: v.copy() for k, v in federation.weights.items()}
    federation.run(rows.append)
    return Run([_numbers(row) for row in rows], initial, federation.weights)


def _numbers(row: Mapping[str, Any]) -> dict[str, Any]:
    """A round's numbers: timings (`*_s`), where clients ran and the per-client log's places left out."""
    where = {f.name for f in dataclasses.fields(WorkerPlace)}
    kept: dict[str, Any] = {}
    for key, value in row.items():
        if key.endswith("_s") or key in where:
            continue
        if key == CLIENT_LOG_KEY:
            value = [{k: v for k, v in r.items() if k not in where and not k.endswith("_s")} for r in value]
        kept[key] = value
    return kept


def _acc_set_size(key: str, data: FederatedData) -> int:
    """How many samples an accuracy is taken over (the smallest client's validation share for per-client ones)."""
    name = key.rpartition(".")[2]
    if name.endswith("test_acc"):
        return len(data.dataset.y_test)
    if name.endswith("val_acc") and not name.startswith("personal"):
        return len(data.val_indices)
    return min(len(part) for part in data.val_parts)


def _number_gaps(where: str, key: str, a: Any, b: Any, data: FederatedData) -> list[str]:
    """`a` against `b` (a logged value: a number, a string, or a list or dict of them), one line per difference."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return [f"{where}: {key}: entries {sorted(a)} against {sorted(b)}"]
        return [line for k in sorted(a) for line in _number_gaps(where, f"{key}.{k}", a[k], b[k], data)]
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return [f"{where}: {key}: {len(a)} entries against {len(b)}"]
        return [line for i, (x, y) in enumerate(zip(a, b)) for line in _number_gaps(where, f"{key}[{i}]", x, y, data)]
    numbers = (int, float, np.number)
    if isinstance(a, bool) or isinstance(b, bool) or not (isinstance(a, numbers) and isinstance(b, numbers)):
        return [] if a == b else [f"{where}: {key}: {a!r} against {b!r}"]
    a, b = float(a), float(b)
    if a == b or (math.isnan(a) and math.isnan(b)):
        return []
    if "acc" in key:
        bound = ACC_SAMPLES / _acc_set_size(key, data) + 1e-12
    else:
        bound = LOSS_RTOL * max(abs(a), abs(b)) + LOSS_ATOL
    if abs(a - b) <= bound:
        return []
    return [f"{where}: {key}: {a!r} against {b!r} (|diff| {abs(a - b):.3g} > {bound:.3g})"]


def differences(reference: Run, other: Run, data: FederatedData) -> list[str]:
    """What differs beyond the tolerances, one line each (empty: the runs agree)."""
    if len(reference.rows) != len(other.rows):
        return [f"{len(reference.rows)} rounds against {len(other.rows)}"]
    out: list[str] = []
    for ref, row in zip(reference.rows, other.rows):
        out += _number_gaps(f"round {ref.get('round')}", "metrics", ref, row, data)
    if reference.final.keys() != other.final.keys():
        return [*out, f"weights: keys differ: {sorted(reference.final.keys() ^ other.final.keys())}"]
    error, update, size, worst = 0.0, 0.0, 0.0, ("", 0.0)
    for key, start in reference.initial.items():
        a, b = reference.final[key], other.final[key]
        if not is_float_entry(a):
            if a.shape != b.shape or not np.array_equal(a, b):
                out.append(f"weights: {key}: {a!r} against {b!r}")
            continue
        a64 = a.astype(np.float64)
        gap = float(np.sum((a64 - b) ** 2))
        error, update, size = error + gap, update + float(np.sum((a64 - start) ** 2)), size + float(np.sum(a64**2))
        worst = max(worst, (key, gap), key=lambda w: w[1])
    error, update, size = math.sqrt(error), math.sqrt(update), math.sqrt(size)
    bound = UPDATE_RTOL * update + WEIGHT_ATOL * size
    if not error <= bound:
        out.append(
            f"weights: |diff| {error:.3g} > {bound:.3g} (update norm {update:.3g}; "
            f"most of it in {worst[0]}: {math.sqrt(worst[1]):.3g})"
        )
    return out


def largest_relative_gap(reference: Run, other: Run) -> dict[str, float]:
    """For the record: the largest relative difference in the losses, and the model update's (as compared above)."""
    losses = [
        abs(float(r[k]) - float(o[k])) / max(abs(float(r[k])), 1e-12)
        for r, o in zip(reference.rows, other.rows)
        for k in ("val_loss", "test_loss", "train_loss")
        if k in r and k in o
    ]
    floats = [k for k, v in reference.initial.items() if is_float_entry(v)]
    error = math.sqrt(sum(float(np.sum((reference.final[k].astype(np.float64) - other.final[k]) ** 2)) for k in floats))
    update = math.sqrt(sum(float(np.sum((reference.final[k].astype(np.float64) - reference.initial[k]) ** 2))
                           for k in floats))  # fmt: skip
    return {"loss": max(losses, default=0.0), "update": error / update if update else 0.0}


@pytest.fixture
def exact_float32():
    """TF32 off for the comparison: Ampere and later GPUs run float32 convolutions (and, if allowed, matmuls) with
    10-bit mantissas by default, an error of about 1e-3 per layer that says nothing about the code on the device."""
    before = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = before


@needs_cuda
@pytest.mark.parametrize(("method", "params"), CASES, ids=CASE_IDS)
def test_method_trains_on_cuda_as_on_cpu(method, params, exact_float32):
    cpu = train(method, params, "cpu")
    cuda = train(method, params, "cuda")
    gaps = largest_relative_gap(cpu, cuda)  # printed: `-s` shows how much of the tolerances a GPU uses
    print(f"{method} {params}: largest relative gap, losses {gaps['loss']:.2e}, updates {gaps['update']:.2e}")
    found = differences(cpu, cuda, tiny_data())
    assert not found, f"{method} {params}: CUDA against CPU:\n" + "\n".join(found)
    assert all(math.isfinite(row["val_loss"]) for row in cuda.rows)


def _one_step(ctx: ClientContext, method: Method, optimizer: PlainSGD, num_classes: int) -> None:
    """One local step as engine/local.py takes it: forward, the terms, backward, the hooks, the update."""
    xb, yb = ctx.x[:16], ctx.y[:16]
    logits, z = ctx.model(xb)
    loss = F.cross_entropy(logits, yb)
    batch = Batch(xb, yb, logits, z, ctx.model, num_classes)
    for term in method.terms:
        loss = loss + term.weight * term.loss(batch)
    optimizer.zero_grad()
    loss.backward()
    for hook in method.all_hooks:
        hook.after_backward(ctx)
    optimizer.step()


def second_round_step(method: str, params: Mapping[str, Any], device: str, checked: Callable[[], Any]) -> None:
    """Round 1 of the tiny federation on `device`, then client 0's round 2 up to two local steps: the second inside
    `checked()` (a context manager), after a warm-up step (per-round work, lazy caches)."""
    kept: dict[str, InProcessPool] = {}

    def pool_factory(data: FederatedData, spec: WorkerSpec) -> InProcessPool:
        kept["pool"] = pool = in_process_pool(data, spec)
        return pool

    data, cid = tiny_data(), 0
    experiment = EXPERIMENT.model_copy(update={"rounds": 1})
    federation = Federation(experiment, method, dict(params), pool_factory, data=data, device=device)
    federation.run(lambda row: None)
    worker = kept["pool"].worker
    state = federation.client_states.get(cid) or {}
    personalise = worker.method.personalise
    load_weights(worker.model, personalise(federation.weights, state) if personalise else federation.weights)
    index = torch.from_numpy(data.train_parts[cid])
    x = worker.spec.model.images(torch.from_numpy(data.dataset.x_train)[index]).to(device)
    y = torch.from_numpy(data.dataset.y_train)[index].to(device)
    payload = federation.method.aggregator.payload()
    ctx = ClientContext(worker.model, cid, 2, x, y, worker.spec.local.lr, state, payload)
    worker.model.train()
    for hook in worker.method.all_hooks:
        hook.on_round_start(ctx)
    optimizer = PlainSGD([p for p in worker.model.parameters() if p.requires_grad], lr=0.05, momentum=0.9)
    classes = worker.spec.model.num_classes
    _one_step(ctx, worker.method, optimizer, classes)
    if device != "cpu":
        torch.cuda.synchronize()
    with checked():
        _one_step(ctx, worker.method, optimizer, classes)
    for hook in worker.method.all_hooks:
        hook.on_round_end(ctx)


@contextlib.contextmanager
def no_gpu_sync():
    """Inside: an operation that makes the host wait for the GPU raises (torch's CUDA sync debug mode)."""
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")


@needs_cuda
@pytest.mark.parametrize(("method", "params"), CASES, ids=CASE_IDS)
def test_a_local_step_of_the_method_never_waits_for_the_gpu(method, params):
    """A method's per-step code (its terms' `loss`, its hooks' `after_backward`) never makes the host wait for the
    GPU (`.item()`, a boolean mask, a copy to or from the host), with the loop's own step around it (forward,
    backward, the optimiser): in a second round, so that per-client and server state from the first takes every
    branch of the terms. Round start and end may copy: they run once a round."""
    second_round_step(method, params, "cuda", no_gpu_sync)


# ------------------------------------------------------------------------------------------------ on the CPU


@pytest.fixture
def one_thread():
    """One CPU thread: FedUV's official kernel (explicit pairwise differences) has a backward that accumulates in a
    thread-dependent order, so with several threads two CPU runs agree to rounding only
    (tests/methods/test_losses.py)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize(("method", "params"), [("feddyn", {}), ("feduv", {"fidelity": "official"})])
def test_a_seed_replays_bit_for_bit_on_the_cpu(method, params, one_thread):
    """The helper on this machine: two CPU runs of a seed are identical, so the comparison has nothing to absorb."""
    first, second = train(method, params, "cpu"), train(method, params, "cpu")
    assert first.rows == second.rows and len(first.rows) == EXPERIMENT.rounds
    assert all(np.array_equal(first.final[k], second.final[k]) for k in first.final)
    assert differences(first, second, tiny_data()) == []
    assert largest_relative_gap(first, second) == {"loss": 0.0, "update": 0.0}


def test_the_comparison_sees_a_different_run():
    """Another seed (other initial weights, batches): the comparison reports it, losses and weights alike."""
    first = train("fedavg", {}, "cpu")
    other = train("fedavg", {}, "cpu", EXPERIMENT.model_copy(update={"seed": 1}))
    found = differences(first, other, tiny_data())
    assert any("val_loss" in line for line in found) and any(line.startswith("weights:") for line in found), found
    # the same rounds, each update 5% shorter: beyond UPDATE_RTOL, and seen
    shorter = {k: v + 0.95 * (first.final[k] - v) if is_float_entry(v) else v for k, v in first.initial.items()}
    short = Run(first.rows, first.initial, shorter)
    assert math.isclose(largest_relative_gap(first, short)["update"], 0.05, rel_tol=1e-4)
    found = differences(first, short, tiny_data())
    assert found and all(line.startswith("weights:") for line in found), found


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=needs_cuda)])
def test_numpy_copy_copies_once_into_c_ordered_arrays_of_the_same_shape(device):
    """weights.numpy_copy: a CPU tensor's `.numpy()` shares its memory (copied), another device's `.cpu()` is already a
    copy (not copied again): either way arrays of the tensors' shapes (0-d too), in C order, that no later write to
    the tensors reaches."""
    base = torch.arange(24.0, device=device)
    tensors = {
        "weight": base[:6].reshape(2, 3),
        "transposed": base[:6].reshape(2, 3).T,  # strided
        "conv": base.reshape(1, 2, 3, 4).contiguous(memory_format=torch.channels_last),  # NHWC strides
        "num_batches_tracked": torch.tensor(5, device=device),  # 0-d
    }
    arrays = numpy_copy(tensors)
    expected = {key: t.cpu().numpy().copy() for key, t in tensors.items()}
    for key, t in tensors.items():
        assert arrays[key].shape == tuple(t.shape) and arrays[key].flags.c_contiguous, key
        assert arrays[key].dtype == expected[key].dtype and np.array_equal(arrays[key], expected[key]), key
    with torch.no_grad():
        base.add_(100.0)
        tensors["num_batches_tracked"].add_(1)
    for key in tensors:
        assert np.array_equal(arrays[key], expected[key]), f"{key} aliases the tensor"
