"""UniVarFL's code: the hyperspherical energy term (raytune_fl.methods.univarfl explains the method)."""

from __future__ import annotations

from torch import Tensor

from raytune_fl.methods.base import Batch, LocalTerm
from raytune_fl.methods.losses import hyperspherical_energy


class HypersphericalEnergy(LocalTerm):
    name = "energy"
    per_sample = False  # an energy over pairs of the batch's samples

    def __init__(self, weight: float, eps: float, include_diagonal: bool) -> None:
        super().__init__(weight)
        self.eps, self.include_diagonal = eps, include_diagonal

    def loss(self, batch: Batch) -> Tensor:
        return hyperspherical_energy(batch.z, self.eps, self.include_diagonal)
