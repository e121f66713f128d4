"""Mixed precision (`precision: fp32 | bf16 | fp16`, engine/precision.py): the forward pass in autocast, everything
else float32.

fp32 is the plain loop bit for bit; bf16 and fp16 are torch's own autocast recipe bit for bit (fp16 with GradScaler).
How far bf16 moves training from fp32 is measured, not derived: this 8-layer BatchNorm CNN amplifies rounding (its
first layers' gradients are differences of nearly equal numbers), so bf16's 8-bit mantissa changes a step's gradient
by ~30% (relative, measured against float64 on random and on digits batches; fp32's is 2e-6). Over a few steps
that is a few percent of the weights; on a real workload the accuracy is the same.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from raytune_fl.config import ExperimentConfig, ResourcesConfig
from raytune_fl.devices import BF16_CPUS, BF16_INSTEAD, bf16_refusal
from raytune_fl.engine.batched import train_local_batched
from raytune_fl.engine.evaluation import predict
from raytune_fl.engine.federation import Federation, in_process_pool
from raytune_fl.engine.local import LocalData, LocalSettings, pass_batches, train_local
from raytune_fl.engine.precision import (
    FP16_INIT_SCALE,
    LossScaler,
    PrecisionError,
    StackedLossScaler,
    check_precision,
    supports_bf16,
)
from raytune_fl.methods import build_method
from raytune_fl.methods.base import Batch, ClientContext, LocalTerm, MethodContext
from raytune_fl.models import build_model
from raytune_fl.tracking.records import experiment_params
from raytune_fl.types import is_float_entry
from raytune_fl.weights import read_weights

CPU = torch.device("cpu")
needs_bf16 = pytest.mark.skipif(not supports_bf16(CPU), reason="this CPU has no bfloat16 kernels")

SHAPE = (3, 32, 32)
# the project's default optimiser (FedUV's: lr 0.01, momentum 0.9, weight decay 1e-5); 50 samples, batch 10: 5 steps
SETTINGS = LocalSettings(epochs=1, batch_size=10, lr=0.01, momentum=0.9, weight_decay=1e-5)

# bf16 against fp32 after SETTINGS' 5 steps from the same start on the same batches: the difference of the trained
# parameters relative to their norm (all of them as one vector). Measured over data seeds 0-5 on a 2-core AMD EPYC
# (AVX-512 BF16), torch 2.14: 3.1e-2 to 3.3e-2, where the steps moved the parameters by 4.5e-2 to 5.0e-2 of their
# norm; the cosine of bf16's update with fp32's: 0.76 to 0.79. The cosine is the sharper check: a step skipped or
# of the wrong sign fails it while the difference could still pass.
BF16_WEIGHT_RTOL = 6e-2
BF16_UPDATE_COSINE = 0.5
# bf16 stacked (client_batch > 1) against bf16 one client at a time, same measure, 2 clients x 3 steps: 7.8e-3 to
# 1.1e-2 over data seeds 0-5. The batched kernels sum in another order (fp32 stacked against fp32 sequential: 6e-8),
# which in bf16 flips an ulp here and there, amplified as above: the same order as bf16 stacked against fp32 stacked
# (1.2e-2 to 1.3e-2). So whether the stacked step computes in bf16 at all is checked apart (the op dtypes).
STACKED_BF16_RTOL = 2.5e-2
# fp16, client 0 stacked beside a client whose steps all overflow, against client 0 alone: 6.7e-3 (its first step
# lost to the other client's overflow, as one scale for the batch would do, moves it by 2.6e-2)
FP16_STACKED_RTOL = 1.5e-2
SHRINK = 0.02  # client 1's first convolution, scaled: its gradient x50, past fp16's range at scales 1024-4096
ACCURACY_GAP = 0.05  # final test accuracy on digits, bf16 against fp32 (measured gaps: 0.003-0.011, 4 seeds)


def _data(seed: int = 0, n: int = 50) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(n, *SHAPE, generator=generator), torch.randint(0, 10, (n,), generator=generator)


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_model("simple_cnn", SHAPE[0], 10, SHAPE[1:])


def _train(
    precision: str | None, x: torch.Tensor, y: torch.Tensor, method: str = "fedavg", seed: int = 0
) -> tuple[dict, dict, torch.nn.Module]:
    """train_local from `_model(seed)`: initial and final weights, and the model. None: the setting left out."""
    model = _model(seed)
    initial = read_weights(model)
    settings = SETTINGS if precision is None else LocalSettings(**{**SETTINGS.__dict__, "precision": precision})
    method_ = build_method(method, {}, MethodContext(10))
    train_local(model, method_, LocalData(x, y, 10), settings, torch.Generator().manual_seed(1))
    return initial, read_weights(model), model


def _hand_loop(x: torch.Tensor, y: torch.Tensor, context: Callable[[], contextlib.AbstractContextManager], scaler=None):
    """The textbook loop train_local runs for FedAvg: the same batches, torch.optim.SGD, `context` around the
    forward pass, the logits in float32 for the loss; `scaler`: torch's GradScaler recipe."""
    model = _model()
    model.train()
    optimizer = torch.optim.SGD(
        model.parameters(), lr=SETTINGS.lr, momentum=SETTINGS.momentum, weight_decay=SETTINGS.weight_decay
    )
    order = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(1))
    for start, size in pass_batches(x.shape[0], SETTINGS):
        index = order[start : start + size]
        with context():
            logits, _ = model(x[index])
        loss = F.cross_entropy(logits.float(), y[index])
        optimizer.zero_grad(set_to_none=True)
        if scaler is None:
            loss.backward()
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
    return read_weights(model)


def _assert_bit_equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].dtype == b[key].dtype and np.array_equal(a[key], b[key]), key


def _vector(weights: dict) -> np.ndarray:
    """The trainable parameters as one float64 vector (BatchNorm's statistics and counters left out)."""
    keys = sorted(k for k in weights if is_float_entry(weights[k]) and "running_" not in k)
    return np.concatenate([weights[k].ravel().astype(np.float64) for k in keys])


def _relative(a: dict, b: dict) -> float:
    return float(np.linalg.norm(_vector(a) - _vector(b)) / np.linalg.norm(_vector(b)))


def _float32(weights: dict) -> bool:
    return all(v.dtype == np.float32 for v in weights.values() if is_float_entry(v))


# ---- fp32: the plain path


def test_fp32_is_the_plain_loop_bit_for_bit():
    x, y = _data()
    _, defaulted, _ = _train(None, x, y)
    _, explicit, _ = _train("fp32", x, y)
    _assert_bit_equal(explicit, defaulted)
    # the loop by hand, with no autocast context and with a disabled one: the same numbers
    _assert_bit_equal(explicit, _hand_loop(x, y, contextlib.nullcontext))
    _assert_bit_equal(explicit, _hand_loop(x, y, lambda: torch.autocast("cpu", enabled=False)))


def test_fp32_evaluation_is_the_plain_forward_bit_for_bit():
    x, y = _data(n=30)
    model = _model()
    plain = predict(model, x, y, 16)
    explicit = predict(model, x, y, 16, "fp32")
    assert np.array_equal(plain[0], explicit[0]) and np.array_equal(plain[1], explicit[1])


# ---- bf16 and fp16: torch's autocast recipe


@needs_bf16
def test_bf16_is_the_autocast_loop_bit_for_bit():
    x, y = _data()
    _, trained, model = _train("bf16", x, y)
    _assert_bit_equal(trained, _hand_loop(x, y, lambda: torch.autocast("cpu", dtype=torch.bfloat16)))
    assert all(p.dtype == torch.float32 for p in model.parameters()) and _float32(trained)


def test_fp16_is_the_grad_scaler_loop_bit_for_bit_and_float32():
    x, y = _data()
    initial, trained, _ = _train("fp16", x, y)
    scaler = torch.amp.GradScaler("cpu", init_scale=FP16_INIT_SCALE)
    _assert_bit_equal(trained, _hand_loop(x, y, lambda: torch.autocast("cpu", dtype=torch.float16), scaler))
    assert _float32(trained)
    assert all(np.isfinite(v).all() for v in trained.values() if is_float_entry(v))
    assert _relative(trained, initial) > 1e-3  # it trained


@needs_bf16
def test_bf16_training_stays_within_the_measured_tolerance_of_fp32():
    x, y = _data()
    initial, fp32, _ = _train("fp32", x, y)
    _, bf16, _ = _train("bf16", x, y)
    difference = _relative(bf16, fp32)
    assert 0 < difference < BF16_WEIGHT_RTOL  # not 0: bf16 really computed in bf16
    update32, update16 = _vector(fp32) - _vector(initial), _vector(bf16) - _vector(initial)
    cosine = update16 @ update32 / (np.linalg.norm(update16) * np.linalg.norm(update32))
    assert cosine > BF16_UPDATE_COSINE


class _Recording(LocalTerm):
    """A zero-weight term that keeps the dtypes it is shown and computes a variance term in them."""

    name = "recording"

    def __init__(self) -> None:
        super().__init__(0.0)
        self.seen: list[torch.dtype] = []

    def loss(self, batch: Batch) -> torch.Tensor:
        value = batch.z.var(dim=0).mean()
        self.seen += [batch.logits.dtype, batch.z.dtype, value.dtype]
        return value


@needs_bf16
def test_loss_terms_see_float32_outputs():
    """Every term reads the model's outputs in float32 (here beside UniVarFL's variance and covariance terms): the
    forward ran in bf16, its outputs were cast back before any term."""
    recording = _Recording()
    method = build_method("univarfl", {}, MethodContext(10))
    method = dataclasses.replace(method, terms=(*method.terms, recording))
    x, y = _data(n=20)
    settings = LocalSettings(1, 10, 0.01, 0.9, 0.0, precision="bf16")
    result = train_local(_model(), method, LocalData(x, y, 10), settings, torch.Generator())
    assert recording.seen and set(recording.seen) == {torch.float32}
    assert all(math.isfinite(v) for v in result.metrics.values())


# ---- the stacked step (client_batch > 1)


def _start(k: int, shrink_second: float) -> torch.nn.Module:
    """Client k's starting model: `_model()`, client 1's first convolution times `shrink_second`. BatchNorm after
    it leaves the forward pass as it was and divides that weight's gradient by the factor (an fp16 overflow)."""
    model = _model()
    if k == 1:
        with torch.no_grad():
            model.encoder[0].weight.mul_(shrink_second)
    return model


def _stacked_and_sequential(precision: str, shrink_second: float = 1.0) -> tuple[list[dict], list[dict]]:
    """Two clients of 30 samples (3 steps each): stacked, then one at a time, from `_start`."""
    x, y = _data(n=60)
    settings = LocalSettings(**{**SETTINGS.__dict__, "precision": precision})
    starts = [0, 30]

    def contexts(models: list[torch.nn.Module]) -> list[ClientContext]:
        return [
            ClientContext(model, k, 1, x[start : start + 30], y[start : start + 30], settings.lr)
            for k, (model, start) in enumerate(zip(models, starts))
        ]

    models = [_start(k, shrink_second) for k in range(2)]
    methods = [build_method("fedavg", {}, MethodContext(10)) for _ in models]
    generators = [torch.Generator().manual_seed(k) for k in range(2)]
    train_local_batched(models, methods, LocalData(x, y, 10), settings, generators, contexts(models), [None, None])
    stacked = [read_weights(m) for m in models]
    sequential = []
    for k, start in enumerate(starts):
        model = _start(k, shrink_second)
        ctx = ClientContext(model, k, 1, x[start : start + 30], y[start : start + 30], settings.lr)
        method = build_method("fedavg", {}, MethodContext(10))
        train_local(model, method, LocalData(ctx.x, ctx.y, 10), settings, torch.Generator().manual_seed(k), ctx)
        sequential.append(read_weights(model))
    return stacked, sequential


@needs_bf16
def test_the_stacked_step_in_bf16_matches_the_sequential_one():
    stacked, sequential = _stacked_and_sequential("bf16")
    stacked32, _ = _stacked_and_sequential("fp32")
    for a, b, c in zip(stacked, sequential, stacked32):
        assert _float32(a)
        assert _relative(a, b) < STACKED_BF16_RTOL
        assert _relative(a, c) > 1e-4  # the stacked step computed in bf16 (fp32 stacked vs sequential: 6e-8)


@needs_bf16
def test_every_matrix_op_of_the_stacked_step_runs_in_bf16():
    """vmap's batching rules bypass autocast for convolutions (torch 2.14): engine/precision.py casts for them."""
    dtypes: set[torch.dtype] = set()
    x, y = _data(n=20)
    models = [_model(), _model()]
    for module in models[0].modules():
        if isinstance(module, (torch.nn.Conv2d, torch.nn.Linear)):
            module.register_forward_hook(lambda _m, _i, out: dtypes.add(out.dtype))
    settings = LocalSettings(1, 10, 0.01, 0.0, 0.0, precision="bf16")
    contexts = [
        ClientContext(m, k, 1, x[10 * k : 10 * k + 10], y[10 * k : 10 * k + 10], 0.01) for k, m in enumerate(models)
    ]
    methods = [build_method("fedavg", {}, MethodContext(10)) for _ in models]
    generators = [torch.Generator().manual_seed(k) for k in range(2)]
    train_local_batched(models, methods, LocalData(x, y, 10), settings, generators, contexts, [None, None])
    assert dtypes == {torch.bfloat16}


def test_fp16_stacked_skips_exactly_the_overflowing_clients_steps():
    """Client 1's first-layer gradients overflow fp16 at every scale its 3 steps try (4096, 2048, 1024): each of
    its steps is skipped, stacked as alone, while client 0 beside it trains as it does alone (one scale per
    client, not one for the batch)."""
    stacked, sequential = _stacked_and_sequential("fp16", shrink_second=SHRINK)
    start = read_weights(_start(1, SHRINK))
    for weights in (stacked[1], sequential[1]):  # no step reached a weight (nor the NaN of an overflow)
        assert np.array_equal(_vector(weights), _vector(start))
    assert _float32(stacked[0]) and np.isfinite(_vector(stacked[0])).all()
    assert _relative(stacked[0], read_weights(_model())) > 1e-2  # client 0 trained
    assert _relative(stacked[0], sequential[0]) < FP16_STACKED_RTOL


def test_loss_scalers_unscale_then_step_or_skip_as_grad_scaler():
    """LossScaler (GradScaler around PlainSGD's step) and StackedLossScaler (a scale per client row) over the same
    overflows: the step sees unscaled gradients or is skipped, the scales back off and grow alike (growth interval
    shortened to 2 steps on both)."""
    scaler = LossScaler(CPU)
    scaler.scaler = torch.amp.GradScaler("cpu", init_scale=FP16_INIT_SCALE, growth_interval=2)
    stacked = StackedLossScaler(2, CPU)
    stacked.interval = 2
    param = torch.nn.Parameter(torch.zeros(3))
    pattern = [False, True, False, False, True, True, False, False, False]
    for overflow in pattern:
        gradient = torch.tensor([math.inf if overflow else 1.0, 2.0, 3.0])
        param.grad = scaler.scale(gradient)  # as a loss's backward would give it
        seen: list[torch.Tensor] = []
        scaler.step(scaler.unscale([param], lambda seen=seen: seen.append(param.grad.clone())))
        assert seen == [] if overflow else torch.equal(seen[0], gradient)
        # row 0 overflows as above, row 1 never
        grads = {"w": torch.stack([gradient, torch.tensor([1.0, 2.0, 3.0])]) * stacked.scale.view(-1, 1)}
        found = stacked.unscale(grads, stacked.scale)
        stacked.update(torch.arange(2), found)
        assert found.tolist() == [overflow, False]
        assert torch.equal(grads["w"][1], torch.tensor([1.0, 2.0, 3.0]))
        assert stacked.scale[0].item() == scaler.scaler.get_scale()
    assert stacked.scale[1].item() == FP16_INIT_SCALE * 2 ** (len(pattern) // 2)  # grew every second clean step


# ---- evaluation


@needs_bf16
def test_bf16_evaluation_is_close_to_fp32_and_keeps_float64_losses():
    x, y = _data(n=40)
    model = _model().eval()
    losses32, correct32 = predict(model, x, y, 16)
    losses16, correct16 = predict(model, x, y, 16, "bf16")
    assert losses16.dtype == np.float64 and all(p.dtype == torch.float32 for p in model.parameters())
    assert losses16.mean() == pytest.approx(losses32.mean(), rel=2e-2)
    assert not np.array_equal(losses16, losses32)  # computed in bf16


# ---- the engine end to end


def _digits(precision: str) -> ExperimentConfig:
    # 2 IID clients: 4 Dirichlet clients' test accuracy jumps by 0.1-0.3 between rounds in fp32 alone
    return ExperimentConfig.model_validate(
        {
            "dataset": "digits",
            "partition": {"kind": "iid", "clients": 2, "seed": 1},
            "rounds": 6,
            "local_epochs": 2,
            "batch_size": 32,
            "optimizer": {"lr": 0.02, "schedule": {"kind": "cosine"}},
            "resources": {"actors": 0},
            "checkpoint_every": 0,
            "precision": precision,
        }
    )


@needs_bf16
def test_bf16_reaches_fp32_accuracy_on_digits():
    finals = {}
    for precision in ("fp32", "bf16"):
        rows: list = []
        federation = Federation(_digits(precision), "fedavg", {}, pool_factory=in_process_pool)
        # the setting travels: the clients' LocalSettings and the evaluator (engine/federation.py builds both)
        wired = (federation.spec.local.precision, federation.evaluator.precision)
        assert wired == (precision, precision), "precision does not reach the local settings or the evaluator"
        federation.run(rows.append)
        assert _float32(federation.weights)  # the aggregated model
        finals[precision] = rows[-1]
    assert finals["fp32"]["test_acc"] > 0.9  # it learned (0.986-0.992 measured)
    assert finals["bf16"]["test_acc"] == pytest.approx(finals["fp32"]["test_acc"], abs=ACCURACY_GAP)
    assert finals["bf16"]["train_loss"] != finals["fp32"]["train_loss"]


# ---- the refusal, and the record


def test_bf16_without_device_support_is_refused_naming_the_field():
    for device in ("cpu", "cuda:0"):
        with pytest.raises(PrecisionError) as refused:
            check_precision("bf16", device, bf16_supported=False)
        assert str(refused.value).splitlines()[0].startswith("precision: 'bf16' needs")
        # the driver's refusal before Ray (devices.bf16_refusal) offers the same ways out, from the same text
        assert f"has none\n{BF16_INSTEAD}, or train on a device with bf16" in str(refused.value)
    before_ray = bf16_refusal("bf16", ResourcesConfig(device="cpu"), bf16=False)
    assert f"{BF16_INSTEAD}, or run on a cluster" in str(before_ray) and BF16_CPUS in str(before_ray)
    check_precision("bf16", "cpu", bf16_supported=True)
    for precision in ("fp32", "fp16"):  # they need no bf16 kernels
        check_precision(precision, "cpu", bf16_supported=False)


def test_precision_is_an_mlflow_param():
    assert experiment_params(ExperimentConfig(precision="bf16"))["precision"] == "bf16"
    assert experiment_params(ExperimentConfig())["precision"] == "fp32"
