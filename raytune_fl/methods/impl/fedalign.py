"""FedAlign's code: the Lipschitz alignment term (raytune_fl.methods.fedalign explains the method)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from raytune_fl.methods.base import Batch, ClientContext, LocalTerm
from raytune_fl.methods.lipschitz import lipschitz_gap, top_singular_value, transmitting_matrix
from raytune_fl.models.final_block import FinalBlock, reduced_channels

EPS = 1e-8  # guards the official scale's division by L_lip


class LipschitzAlignment(LocalTerm):
    batchable = False  # runs a width-reduced copy of the model each step
    name = "lipschitz"  # logged unweighted as term_lipschitz
    per_sample = False  # the reduced block's BatchNorm on batch statistics; the official scale: batch means' ratio

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
        a, b = self.block.inputs.detach().float(), self.block.outputs.detach().float()  # fp32 under autocast too
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
