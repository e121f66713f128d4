"""Freeze: a FedBABU-like baseline (Oh, Kim & Yun, ICLR 2022) with a fixed random classifier.

The classifier (`model.classifier`, the last linear layer) keeps its random initialisation: it is
never trained (its parameters are left out of the local optimiser, so no step, momentum or weight
decay touches them) and never aggregated (the server copies the global classifier entries through
unchanged, whatever the clients send). Everything else is FedAvg.

The official FedUV code's `freeze` path does not actually freeze the classifier; we do not
reproduce that bug (see METHODS.md, "Freeze").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import nn

from raytune_fl.aggregators import fedavg
from raytune_fl.methods.base import ClientContext, ClientHook, Method, MethodContext, Stateless
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


def build(params: dict[str, Any], context: MethodContext) -> Method:
    return Method("freeze", (), Stateless(fedavg_keep_classifier), hooks=(FreezeClassifier(),))
