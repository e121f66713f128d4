"""Freeze's code: the classifier left out of training and of aggregation (raytune_fl.methods.freeze explains
the method)."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from raytune_fl.aggregators import fedavg
from raytune_fl.methods.base import ClientContext, ClientHook
from raytune_fl.types import ClientUpdate, Weights

CLASSIFIER_PREFIX = "classifier."  # state_dict keys of `model.classifier` in every registered model


class FreezeClassifier(ClientHook):
    name = "freeze_classifier"

    def __init__(self) -> None:
        self._frozen: list[nn.Parameter] = []

    def on_round_start(self, ctx: ClientContext) -> None:
        classifier = getattr(ctx.model, "classifier", None)
        if not isinstance(classifier, nn.Module):
            raise ValueError(f"freeze: the model {type(ctx.model).__name__} has no `classifier` module")
        # before the optimiser is built, so the loop leaves these parameters out of it
        self._frozen = [p for p in classifier.parameters() if p.requires_grad]
        for p in self._frozen:
            p.requires_grad_(False)

    def on_round_end(self, ctx: ClientContext) -> None:
        # hand the model back as found: the freeze is this method's business, not the model's
        for p in self._frozen:
            p.requires_grad_(True)
        self._frozen = []


def fedavg_keep_classifier(global_weights: Weights, updates: Sequence[ClientUpdate]) -> Weights:
    """FedAvg of every entry except the classifier's, which stay the global ones (never aggregated)."""
    new = fedavg(global_weights, updates)
    for key, value in global_weights.items():
        if key.startswith(CLASSIFIER_PREFIX):
            new[key] = value.copy()
    return new
