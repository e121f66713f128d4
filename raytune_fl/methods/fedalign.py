"""FedAlign (Mendieta et al., CVPR 2022, "Local Learning Matters"): Lipschitz alignment of the final block.

Each local step runs the usual full-width forward (its cross-entropy is the only CE), keeping A, the input to
the model's final block, and B, its output (raytune_fl.models.final_block). The final block alone is then
run again at reduced width on the first k_in = round(width * C_in) channels of the detached A, every conv and
BatchNorm affine sliced to its first round(width * C) channels and BatchNorm on batch statistics, so the
model's running statistics never move; this gives B_s. Per sample the transmitting matrix G = X Y^T / HW (X the
block input pooled to the output's size, Y the output) has its largest singular value sigma estimated by 10 power
iterations (raytune_fl.methods.lipschitz), and

    L_lip = mean over the batch of (sigma(G_s) - sigma(G_full))^2,   G_full from the detached A and B: a target.

Gradients of L_lip reach only the sliced conv and BatchNorm-affine entries of the final block.

scale "official" (the default, mu = 0.45 is calibrated to it): the gradient is mu * (CE / L_lip) * grad L_lip,
CE and L_lip as values (the official code's two backward passes sum to this), so the regulariser weighs mu * CE
whatever the size of L_lip; an eps = 1e-8 guards L_lip = 0 (width 1.0). scale "none": mu * grad L_lip. Either
way `term_lipschitz` logs L_lip itself, and `loss` logs CE + mu * L_lip.

Channel counts are rounded plainly (at least 1), not with the official `make_divisible(., 8)`, which turns
width 0.25 of a 16-channel layer into 8 channels. Supported models: simple_cnn (final block = its last two
conv-BN-ReLU layers, 64 -> 64 channels) and the ResNets (layer4). clip_grad_norm: the official code clips at 10;
0 (the default, as every other method here) does not clip. mu = 0 is FedAvg exactly.
"""

from __future__ import annotations

from typing import Any

import torch.nn.functional as F
from torch import Tensor

from raytune_fl.aggregators import fedavg
from raytune_fl.methods.base import (
    Batch,
    ClientContext,
    ClientHook,
    LocalTerm,
    Method,
    MethodContext,
    Stateless,
    active,
)
from raytune_fl.methods.hooks import GradientClip
from raytune_fl.methods.lipschitz import lipschitz_gap, top_singular_value, transmitting_matrix
from raytune_fl.models.final_block import FinalBlock, reduced_channels

NAME = "fedalign"
EPS = 1e-8  # guards the official scale's division by L_lip


class LipschitzAlignment(LocalTerm):
    batchable = False  # runs a width-reduced copy of the model each step
    name = "lipschitz"  # logged unweighted as term_lipschitz

    def __init__(self, weight: float, width: float, scale: str) -> None:
        super().__init__(weight)
        self.width, self.scale = width, scale
        self.block: FinalBlock | None = None

    def on_round_start(self, ctx: ClientContext) -> None:
        if self.block is not None:  # a round that ended in an error left its hooks on
            self.block.detach()
        self.block = FinalBlock.of(ctx.model)
        self.block.attach()

    def loss(self, batch: Batch) -> Tensor:
        assert self.block is not None and self.block.inputs is not None and self.block.outputs is not None
        a, b = self.block.inputs.detach(), self.block.outputs.detach()
        reduced_in = a[:, : reduced_channels(self.block.in_channels, self.width)]
        b_reduced = self.block.sliced(reduced_in, self.width)
        sigma_full = top_singular_value(transmitting_matrix(a, b))
        sigma_reduced = top_singular_value(transmitting_matrix(reduced_in, b_reduced))
        gap = lipschitz_gap(sigma_reduced, sigma_full)
        if self.scale == "none":
            return gap
        factor = F.cross_entropy(batch.logits.detach(), batch.y) / (gap.detach() + EPS)
        # value: L_lip (what is logged); gradient: factor * grad L_lip (the official scaling)
        scaled = factor * gap
        return scaled - scaled.detach() + gap.detach()

    def on_round_end(self, ctx: ClientContext) -> None:
        if self.block is not None:
            self.block.detach()
        self.block = None


def build(params: dict[str, Any], context: MethodContext) -> Method:
    hooks: tuple[ClientHook, ...] = ()
    if params["clip_grad_norm"] > 0:
        hooks = (GradientClip(params["clip_grad_norm"]),)
    terms = [LipschitzAlignment(params["mu"], params["width"], params["scale"])]
    return Method(NAME, active(terms), Stateless(fedavg), hooks=hooks)
