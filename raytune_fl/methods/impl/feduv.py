"""FedUV's code: the classifier variance and RBF uniformity terms (raytune_fl.methods.feduv explains the
method)."""

from __future__ import annotations

from typing import Any, Literal

from torch import Tensor

from raytune_fl.methods.base import Batch, LocalTerm
from raytune_fl.methods.losses import Statistic, classifier_variance, rbf_uniformity


class ClassifierVariance(LocalTerm):
    name = "variance"
    per_sample = False  # a variance over the batch's samples

    def __init__(self, weight: float, statistic: Statistic) -> None:
        super().__init__(weight)
        self.statistic = statistic

    def loss(self, batch: Batch) -> Tensor:
        return classifier_variance(batch.logits, self.statistic)


# rbf_uniformity's options per fidelity (docs/explanation/methods.md#gaussian-rbf-uniformity)
KERNEL_OPTIONS: dict[str, dict[str, Any]] = {
    "paper": {},
    "official": {"scale": 1.0, "detach_median": False, "drop_zero_distances": True},
}


class RbfUniformity(LocalTerm):
    name = "uniformity"
    per_sample = False  # a kernel over pairs of the batch's samples

    def __init__(self, weight: float, sigma: float | Literal["median"], fidelity: str = "paper") -> None:
        super().__init__(weight)
        self.sigma, self.fidelity = sigma, fidelity

    def loss(self, batch: Batch) -> Tensor:
        return rbf_uniformity(batch.z, self.sigma, **KERNEL_OPTIONS[self.fidelity])
