"""FedAlign through the platform: what the term's gradient reaches, the official scaling, the hooks' lifetime, the
BatchNorm rule, gradient clipping. The maths (transmitting matrix, power iteration, slicing) is checked by hand in
tests/test_fedalign_math.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from raytune_fl.engine.local import LocalSettings
from raytune_fl.engine.worker import ClientWorker, ModelSpec, WorkerSpec
from raytune_fl.methods import METHODS, build_method
from raytune_fl.methods.base import Batch, ClientContext
from raytune_fl.methods.hooks import GradientClip
from raytune_fl.methods.impl.fedalign import LipschitzAlignment
from raytune_fl.models import build_model

SETTINGS = LocalSettings(epochs=1, batch_size=16, lr=0.05, momentum=0.9, weight_decay=1e-4)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return build_model("simple_cnn", 1, 10, (28, 28))


def _batch(n: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(n, 1, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g)


def _term_grads(
    scale: str, width: float = 0.25
) -> tuple[nn.Module, torch.Tensor, dict[str, torch.Tensor | None], float]:
    """Forward once, backward the term alone: (model, term value, each parameter's gradient, the batch's CE)."""
    model = _model()
    x, y = _batch()
    term = LipschitzAlignment(1.0, width, scale)
    term.on_round_start(ClientContext(model, 0, 1, x, y, lr=0.1))
    logits, z = model(x)
    buffers = {k: v.clone() for k, v in model.state_dict().items() if "running" in k or "num_batches" in k}
    value = term.loss(Batch(x, y, logits, z, model, 10))
    after = {k: v for k, v in model.state_dict().items() if k in buffers}
    assert all(torch.equal(buffers[k], after[k]) for k in buffers)  # the reduced pass moves no statistic
    value.backward()
    term.on_round_end(ClientContext(model, 0, 1, x, y, lr=0.1))
    grads = {name: p.grad for name, p in model.named_parameters()}
    return model, value.detach(), grads, F.cross_entropy(logits.detach(), y).item()


def test_the_terms_gradient_reaches_only_the_sliced_final_block():
    _, value, grads, _ = _term_grads("none")
    assert value.item() > 0
    # simple_cnn's final block: encoder.18 (conv 64->64 3x3), .19 (BN), .21 (conv 1x1), .22 (BN); width 0.25: 16
    reached = {name for name, g in grads.items() if g is not None and g.abs().sum() > 0}
    assert reached and reached <= {"encoder.18.weight", "encoder.19.weight", "encoder.19.bias", "encoder.21.weight",
                                   "encoder.22.weight", "encoder.22.bias"}  # fmt: skip
    for name in ("encoder.18.weight", "encoder.21.weight"):
        outside = grads[name].clone()
        outside[:16, :16] = 0
        assert outside.abs().sum() == 0, name
    for name in ("encoder.19.weight", "encoder.22.bias"):
        assert grads[name][16:].abs().sum() == 0, name


def test_the_official_scale_logs_the_gap_and_scales_its_gradient_by_ce_over_the_gap():
    _, plain_value, plain, ce = _term_grads("none")
    _, value, scaled, _ = _term_grads("official")
    assert value.item() == pytest.approx(plain_value.item(), rel=1e-6)  # term_lipschitz is L_lip either way
    factor = ce / (plain_value.item() + 1e-8)
    for name in ("encoder.18.weight", "encoder.22.weight"):
        expected = factor * plain[name]
        torch.testing.assert_close(scaled[name], expected, rtol=1e-4, atol=1e-5 * expected.abs().max().item())


def test_full_width_gives_a_zero_gap_and_finite_gradients():
    _, value, grads, _ = _term_grads("official", width=1.0)
    assert value.item() == pytest.approx(0.0, abs=1e-8)
    assert all(torch.isfinite(g).all() for g in grads.values() if g is not None)


def test_the_hooks_are_gone_after_a_round_and_a_failed_round_does_not_leave_two():
    model = _model()
    x, y = _batch()
    term = LipschitzAlignment(1.0, 0.25, "official")
    ctx = ClientContext(model, 0, 1, x, y, lr=0.1)
    term.on_round_start(ctx)
    term.on_round_start(ctx)  # as after a round that raised before its end
    hooked = [m for m in model.modules() if m._forward_hooks or m._forward_pre_hooks]
    assert len(hooked) == 2  # one input and one output hook, not twice that
    term.on_round_end(ctx)
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


def _worker(params: dict) -> ClientWorker:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 1, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, 40).astype(np.int64)
    return ClientWorker(
        WorkerSpec(ModelSpec("simple_cnn", 1, 10, (28, 28)), "fedalign", params, SETTINGS, 0), x, y, [np.arange(40)]
    )


def test_a_client_round_on_the_workload_model_logs_the_gap_and_leaves_no_hooks():
    worker = _worker({})
    torch.manual_seed(0)
    weights = {k: v.numpy().copy() for k, v in worker.spec.model.build().state_dict().items()}
    update = worker.train(0, 1, weights)
    assert update.metrics["term_lipschitz"] > 0 and np.isfinite(update.metrics["loss"])
    assert update.metrics["loss"] == pytest.approx(update.metrics["ce"] + 0.45 * update.metrics["term_lipschitz"])
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in worker.model.modules())


def test_gradient_clipping_by_hand():
    model = nn.Linear(2, 1, bias=False)
    model.weight.grad = torch.tensor([[3.0, 4.0]])  # norm 5
    GradientClip(1.0).after_backward(ClientContext(model, 0, 1, torch.zeros(1), torch.zeros(1), lr=0.1))
    torch.testing.assert_close(model.weight.grad, torch.tensor([[0.6, 0.8]]), rtol=1e-5, atol=1e-6)
    GradientClip(10.0).after_backward(ClientContext(model, 0, 1, torch.zeros(1), torch.zeros(1), lr=0.1))
    torch.testing.assert_close(model.weight.grad, torch.tensor([[0.6, 0.8]]), rtol=1e-5, atol=1e-6)  # under: kept
    assert [h.name for h in build_method("fedalign", {"clip_grad_norm": 10.0}, 10).hooks] == ["clip_grad_norm"]
    assert build_method("fedalign", {}, 10).hooks == ()


def test_defaults_and_refusals():
    spec = METHODS.get("fedalign")
    assert spec.defaults == {"mu": 0.45, "width": 0.25, "scale": "official", "clip_grad_norm": 0.0}
    assert spec.as_fedavg == {"mu": 0.0}
    with pytest.raises(ValueError, match=r"width: must be a number in \(0, 1\] \(got 1.5\)"):
        build_method("fedalign", {"width": 1.5}, 10)
    term = build_method("fedalign", {}, 10).terms[0]
    mlp = nn.Sequential(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="Sequential"):
        term.on_round_start(ClientContext(mlp, 0, 1, torch.zeros(1), torch.zeros(1), lr=0.1))
