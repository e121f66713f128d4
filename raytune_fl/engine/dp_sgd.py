"""Local DP-SGD's maths in torch (privacy.mechanism: local): per-sample gradients, their clip, the noise and the
fixed-denominator mean that replaces a step's gradient.

A step of a client under `LocalSettings.privacy` (engine/local.py's `_OneClient.private_gradients`):
- each drawn sample's loss (cross-entropy plus the method's active terms, `step_losses` on a batch of that one
  sample) is differentiated alone, `torch.func.vmap(grad(...))` over `functional_call`, so the terms that read
  `batch.model` (FedProx, FedDyn) see the parameters being differentiated;
- each sample's gradient, all trainable parameters flattened into one vector, is scaled to an L2 norm of at most
  `clip_norm`; the scaled gradients are summed;
- Gaussian noise of standard deviation `noise_multiplier * clip_norm` is added to every coordinate, drawn on the
  client's CPU generator (the same numbers on every device, so a seed replays);
- the sum is divided by the expected batch size q n (privacy/local.py), never the drawn one, which would leak it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.func import functional_call, grad, vmap

from raytune_fl.engine.client_step import step_losses
from raytune_fl.engine.steps import LocalPrivacy, LocalSettings
from raytune_fl.methods.base import Batch, LocalTerm, Method


class _SampleLoss(nn.Module):
    """One sample's loss, cross-entropy and terms, for functional_call: the model's parameters are swapped for the
    ones being differentiated while `forward` runs, so a term reading `batch.model` sees them."""

    def __init__(self, model: nn.Module, terms: Sequence[LocalTerm], num_classes: int) -> None:
        super().__init__()
        self.model = model
        self.terms = list(terms)  # not submodules: a term holds no parameters
        self.num_classes = num_classes

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        logits, z = self.model(x)
        batch = Batch(x, y, logits, z, self.model, self.num_classes)
        return torch.stack(step_losses(batch, self.terms, [term.weight for term in self.terms]))


def per_sample_gradients(
    model: nn.Module, terms: Sequence[LocalTerm], num_classes: int, x: Tensor, y: Tensor
) -> tuple[list[Tensor], Tensor]:
    """Each sample's gradient of its own loss, per trainable parameter (in `model.parameters()` order), each
    (samples, *parameter shape); and each sample's loss, cross-entropy and terms, (samples, 2 + len(terms))."""
    wrapper = _SampleLoss(model, terms, num_classes)
    params = {f"model.{name}": p.detach() for name, p in model.named_parameters() if p.requires_grad}

    def one(p: dict[str, Tensor], xi: Tensor, yi: Tensor) -> tuple[Tensor, Tensor]:
        values = functional_call(wrapper, p, (xi.unsqueeze(0), yi.unsqueeze(0)))
        return values[0], values.detach()

    grads, values = vmap(grad(one, has_aux=True), in_dims=(None, 0, 0), randomness="error")(params, x, y)
    return [grads[name] for name in params], values


def clip_factors(grads: Sequence[Tensor], clip_norm: float) -> Tensor:
    """min(1, clip_norm / ||g_i||) per sample i, the norm over all of its parameters' gradients flattened."""
    squares = torch.stack([g.flatten(1).pow(2).sum(dim=1) for g in grads]).sum(dim=0)
    return clip_norm / squares.sqrt().clamp(min=clip_norm)


def clipped_sum(grads: Sequence[Tensor], clip_norm: float) -> list[Tensor]:
    """The sum over samples of each sample's gradient clipped to `clip_norm`, per parameter."""
    factors = clip_factors(grads, clip_norm)
    return [torch.tensordot(factors, g, dims=1) for g in grads]


def noisy_mean(
    sums: Sequence[Tensor], privacy: LocalPrivacy, expected_batch: float, generator: torch.Generator
) -> list[Tensor]:
    """(sum + N(0, (noise_multiplier * clip_norm)^2) per coordinate) / expected_batch, per parameter; the noise drawn
    on `generator` (CPU), parameter after parameter."""
    std = privacy.noise_multiplier * privacy.clip_norm
    out = []
    for total in sums:
        noise = torch.normal(0.0, std, tuple(total.shape), generator=generator, dtype=total.dtype, device="cpu")
        out.append((total + noise.to(total.device)) / expected_batch)
    return out


@dataclass(frozen=True)
class PrivateStep:
    """What a client's DP-SGD steps need besides the model and batch: the settings, the denominator, the noise's
    generator."""

    privacy: LocalPrivacy
    expected_batch: float  # q n: privacy/local.py's LocalPlan.expected_batch
    generator: torch.Generator  # the client's CPU generator

    def gradients(
        self, model: nn.Module, terms: Sequence[LocalTerm], num_classes: int, x: Tensor, y: Tensor
    ) -> tuple[list[Tensor], Tensor | None]:
        """The step's gradient per trainable parameter, and the drawn samples' mean loss, cross-entropy and terms
        (None for an empty batch: the step is noise only)."""
        trainable = [p for p in model.parameters() if p.requires_grad]
        if x.shape[0] == 0:
            sums = [torch.zeros_like(p) for p in trainable]
            return noisy_mean(sums, self.privacy, self.expected_batch, self.generator), None
        grads, values = per_sample_gradients(model, terms, num_classes, x, y)
        sums = clipped_sum(grads, self.privacy.clip_norm)
        return noisy_mean(sums, self.privacy, self.expected_batch, self.generator), values.mean(dim=0)


def private_problem(model: nn.Module, method: Method, settings: LocalSettings) -> str:
    """Why this client cannot train under local DP-SGD ("" when it can): the trial's own check of what the config
    checks refuse before Ray (config/local_dp.py), for what they cannot see (a plugin's model, a term's form)."""
    if settings.precision != "fp32":
        return f"precision: local DP-SGD runs in fp32 only, got {settings.precision}"
    for hook in method.all_hooks:
        if not getattr(hook, "per_sample", True):
            return f"method: {method.name}'s {hook.name!r} cannot run per sample under local DP-SGD"
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.training:
            return "model: BatchNorm in train mode mixes a batch's samples; use batchnorm.local_training: running"
    return ""
