"""Freeze: a FedBABU-like baseline (Oh, Kim & Yun, ICLR 2022) with a fixed random classifier.

The classifier (`model.classifier`, the last linear layer) keeps its random initialisation: it is
never trained (its parameters are left out of the local optimiser, so no step, momentum or weight
decay touches them) and never aggregated (the server copies the global classifier entries through
unchanged, whatever the clients send). Everything else is FedAvg.

The official FedUV code's `freeze` path does not actually freeze the classifier; we do not
reproduce that bug (see docs/explanation/methods.md#freeze).
"""

from __future__ import annotations

from typing import Any

from raytune_fl.methods.base import Method, MethodContext, MethodSpec, Stateless
from raytune_fl.methods.registry import register


def build(params: dict[str, Any], context: MethodContext) -> Method:
    from raytune_fl.methods.impl.freeze import FreezeClassifier, fedavg_keep_classifier

    return Method(SPEC.name, (), Stateless(fedavg_keep_classifier), hooks=(FreezeClassifier(),))


SPEC = register(
    MethodSpec(
        "freeze",
        {},
        build,
        summary="random classifier, never trained nor aggregated (FedBABU-like)",
        as_fedavg=None,  # the classifier never moves, so no setting reproduces FedAvg
    )
)
