"""FedAlign: the maths by hand (transmitting matrix, power iteration, Lipschitz gap, the final-block slicing), then
through the platform (what the term's gradient reaches, the official scaling, the hooks' lifetime, the BatchNorm
rule, gradient clipping)."""

from __future__ import annotations

import copy
import math

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
from raytune_fl.methods.lipschitz import lipschitz_gap, top_singular_value, transmitting_matrix
from raytune_fl.models import build_model
from raytune_fl.models.final_block import FinalBlock, reduced_channels
from raytune_fl.models.resnet import ResNet

# ---- the maths by hand

SIGMA = (1 + math.sqrt(17)) / 4  # top singular value of [[1, 0.5], [0, 1]]


def worked_example() -> tuple[torch.Tensor, torch.Tensor]:
    # rows = channels, hw = 2: X = [[1, 1], [0, 2]], Y = [[2, 0], [0, 1]]
    a = torch.tensor([[1.0, 1.0], [0.0, 2.0]]).reshape(1, 2, 1, 2)
    b = torch.tensor([[2.0, 0.0], [0.0, 1.0]]).reshape(1, 2, 1, 2)
    return a, b


# ---------------------------------------------------------------------------------------------------- lipschitz


def test_transmitting_matrix_worked_example():
    g = transmitting_matrix(*worked_example())
    assert g.shape == (1, 2, 2)
    torch.testing.assert_close(g[0], torch.tensor([[1.0, 0.5], [0.0, 1.0]]))


def test_transmitting_matrix_pools_the_larger_input():
    torch.manual_seed(0)
    a, b = torch.randn(3, 5, 4, 4), torch.randn(3, 7, 2, 2)
    g = transmitting_matrix(a, b)
    assert g.shape == (3, 5, 7)
    x = torch.nn.functional.avg_pool2d(a, 2).flatten(2)  # 4x4 -> 2x2 is an exact 2x2 average
    torch.testing.assert_close(g, x @ b.flatten(2).transpose(1, 2) / 4)


def test_top_singular_value_worked_example():
    sigma = top_singular_value(transmitting_matrix(*worked_example()))
    assert sigma.shape == (1,)
    assert sigma.item() == pytest.approx(SIGMA, abs=1e-6)
    assert SIGMA == pytest.approx(1.280776, abs=1e-6)


def test_top_singular_value_diagonal_and_batched():
    g = torch.stack([torch.diag(torch.tensor([3.0, 1.0])), torch.tensor([[1.0, 0.5], [0.0, 1.0]])])
    torch.testing.assert_close(top_singular_value(g), torch.tensor([3.0, SIGMA]), atol=1e-6, rtol=0)
    # rectangular g (C_in != C_out): agrees with the SVD
    rect = torch.randn(2, 6, 3, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(top_singular_value(rect, iterations=100), torch.linalg.matrix_norm(rect, ord=2))


def test_lipschitz_gap_worked_example():
    gap = lipschitz_gap(torch.tensor([1.0]), torch.tensor([SIGMA]))
    assert gap.dim() == 0
    assert gap.item() == pytest.approx(0.078835, abs=1e-6)
    assert lipschitz_gap(torch.tensor([1.0, 3.0]), torch.tensor([2.0, 3.0])).item() == pytest.approx(0.5)


def test_all_zero_matrix_is_finite_with_finite_gradients():
    g = torch.zeros(2, 4, 3, requires_grad=True)
    sigma = top_singular_value(g)
    assert torch.isfinite(sigma).all() and sigma.max().item() < 1e-5
    lipschitz_gap(sigma, torch.ones(2)).backward()
    assert g.grad is not None and torch.isfinite(g.grad).all()
    # and from feature maps: a dead-ReLU output gives a zero G, still differentiable
    a = torch.randn(2, 3, 4, 4, requires_grad=True)
    b = torch.zeros(2, 5, 2, 2, requires_grad=True)
    top_singular_value(transmitting_matrix(a, b)).sum().backward()
    assert torch.isfinite(a.grad).all() and torch.isfinite(b.grad).all()


def test_gradient_flows_through_the_power_iteration():
    g = torch.tensor([[[1.0, 0.5], [0.0, 1.0]]], requires_grad=True)
    top_singular_value(g).sum().backward()
    # d sigma / d G = u v^T for the top singular pair (u, v)
    u, _, vh = torch.linalg.svd(g.detach()[0])
    torch.testing.assert_close(g.grad[0], torch.outer(u[:, 0], vh[0]), atol=1e-5, rtol=0)


# ---------------------------------------------------------------------------------------------------- final block


def tiny_bottleneck_resnet() -> ResNet:
    """The platform's ResNet with one torchvision Bottleneck per stage: layer4 as in ResNet-50, built cheaply."""
    import torchvision

    def arch(weights: None = None) -> torchvision.models.ResNet:
        return torchvision.models.ResNet(torchvision.models.resnet.Bottleneck, [1, 1, 1, 1])

    return ResNet(arch, in_channels=3, num_classes=10)


def model_and_batch(name: str) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    if name == "simple_cnn":
        return build_model("simple_cnn", 1, 10, (28, 28)), torch.randn(4, 1, 28, 28)
    if name == "resnet18":
        return build_model("resnet18", 3, 10, (16, 16)), torch.randn(2, 3, 16, 16)
    return tiny_bottleneck_resnet(), torch.randn(2, 3, 16, 16)


def buffers(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: b.clone() for name, b in model.named_buffers()}


def test_simple_cnn_block_shapes_and_channels():
    model, x = model_and_batch("simple_cnn")
    block = FinalBlock.of(model).attach()
    assert block.layers == tuple(model.encoder[18:24])
    assert (block.in_channels, block.out_channels) == (64, 64)
    seen = []
    handle = model.encoder[17].register_forward_hook(lambda module, args, out: seen.append(out))
    model(x)
    handle.remove()
    assert block.inputs.shape == (4, 64, 4, 4) and block.outputs.shape == (4, 64, 2, 2)
    # the live tensors, not copies or detached ones: the caller decides what to detach
    assert block.inputs is seen[0] and block.inputs.requires_grad and block.outputs.requires_grad
    block.detach()


def test_width_rounds_to_the_nearest_channel():
    # 0.3 * 64 = 19.2 -> 19: plain rounding, no multiples of 8 (resnet18 at 0.3 is checked with the gradients)
    model, x = model_and_batch("simple_cnn")
    with FinalBlock.of(model) as block:
        model(x)
        assert reduced_channels(block.in_channels, 0.3) == 19
        out = block.sliced(block.inputs[:, :19].detach(), 0.3)
    assert out.shape == (4, 19, 2, 2)
    assert reduced_channels(64, 0.001) == 1  # never fewer than one channel


def test_resnet_block_is_layer4():
    model, x = model_and_batch("resnet18")
    block = FinalBlock.of(model)
    assert block.layers == tuple(model.encoder.layer4)
    assert (block.in_channels, block.out_channels) == (256, 512)
    with block:
        model(x)
        assert block.inputs.shape == (2, 256, 4, 4) and block.outputs.shape == (2, 512, 2, 2)
    assert block.inputs is None and not block.attached
    bottleneck = FinalBlock.of(tiny_bottleneck_resnet())
    assert (bottleneck.in_channels, bottleneck.out_channels) == (1024, 2048)


@pytest.mark.parametrize("name", ["simple_cnn", "resnet18", "bottleneck"])
def test_full_width_slice_is_the_block_forward(name):
    model, x = model_and_batch(name)
    model.train()
    reference = copy.deepcopy(model)  # its own forward; model's running stats stay as they are
    block = FinalBlock.of(model).attach()
    model(x)
    a = block.inputs.detach()
    before = buffers(model)
    out = block.sliced(a, 1.0)
    # against the captured B and against the block's own modules run on A
    torch.testing.assert_close(out, block.outputs.detach(), atol=1e-5, rtol=0)
    ref_block = FinalBlock.of(reference)
    expected = a
    for layer in ref_block.layers:
        expected = layer(expected)
    torch.testing.assert_close(out, expected.detach(), atol=1e-5, rtol=0)
    after = buffers(model)
    assert all(torch.equal(before[k], after[k]) for k in before)
    block.detach()


# 0.3 * 256 = 76.8 -> 77 and 0.3 * 512 = 153.6 -> 154 for resnet18
@pytest.mark.parametrize(
    ("name", "width", "k_out"), [("simple_cnn", 0.25, 16), ("resnet18", 0.3, 154), ("bottleneck", 0.25, 512)]
)
def test_reduced_width_touches_only_its_slices(name, width, k_out):
    model, x = model_and_batch(name)
    block = FinalBlock.of(model).attach()
    model(x)
    k_in = reduced_channels(block.in_channels, width)
    a = block.inputs[:, :k_in].detach()
    model.zero_grad(set_to_none=True)
    before = buffers(model)
    out = block.sliced(a, width)
    assert k_out == reduced_channels(block.out_channels, width)
    assert out.shape[:2] == (x.shape[0], k_out) and out.shape[2:] == block.outputs.shape[2:]
    (out * torch.randn_like(out)).sum().backward()
    after = buffers(model)
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)

    block_params = {id(p) for layer in block.layers for p in layer.parameters()}
    for name_, p in model.named_parameters():
        if id(p) not in block_params:
            assert p.grad is None, name_
    checked = 0
    for layer in block.layers:
        for module in layer.modules():
            if isinstance(module, nn.Conv2d):
                ko, ki = reduced_channels(module.out_channels, width), reduced_channels(module.in_channels, width)
                grad = module.weight.grad
                assert grad[:ko, :ki].abs().sum() > 0
                mask = torch.ones_like(grad, dtype=torch.bool)
                mask[:ko, :ki] = False
                assert torch.count_nonzero(grad[mask]) == 0
                checked += 1
            elif isinstance(module, nn.BatchNorm2d):
                k = reduced_channels(module.num_features, width)
                for p in (module.weight, module.bias):
                    assert p.grad[:k].abs().sum() > 0 and torch.count_nonzero(p.grad[k:]) == 0
    assert checked >= 2
    block.detach()


def test_simple_cnn_quarter_width_shape():
    model, x = model_and_batch("simple_cnn")
    with FinalBlock.of(model) as block:
        model(x)
        out = block.sliced(block.inputs[:, :16].detach(), 0.25)
    assert out.shape == (4, 16, 2, 2)
    conv = model.encoder[18]
    assert conv.weight.grad is None  # sliced alone does not backward


def test_sliced_rejects_a_wrong_channel_count():
    model, x = model_and_batch("simple_cnn")
    with FinalBlock.of(model) as block:
        model(x)
        with pytest.raises(ValueError, match=r"\(n, 16, H, W\)"):
            block.sliced(block.inputs.detach(), 0.25)
        with pytest.raises(ValueError, match="width"):
            block.sliced(block.inputs.detach(), 0.0)


def test_hooks_leave_the_forward_unchanged():
    model, x = model_and_batch("simple_cnn")
    model.eval()  # no running-stat updates between the calls
    block = FinalBlock.of(model)
    plain = model(x)
    block.attach()
    block.attach()  # a second attach registers nothing new
    assert len(block._handles) == 2
    hooked = model(x)
    assert len(model.encoder[18]._forward_pre_hooks) == 1 and len(model.encoder[23]._forward_hooks) == 1
    block.detach()
    block.detach()  # idempotent
    assert not model.encoder[18]._forward_pre_hooks and not model.encoder[23]._forward_hooks
    again = model(x)
    for p, h, g in zip(plain, hooked, again):
        assert torch.equal(p, h) and torch.equal(p, g)
    assert block.inputs is None and block.outputs is None


def test_unsupported_model_names_it():
    class Mystery(nn.Module):
        pass

    with pytest.raises(ValueError, match="Mystery.*FedAlign supports simple_cnn"):
        FinalBlock.of(Mystery())


# ---- through the platform

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
