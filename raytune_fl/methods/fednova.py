"""FedNova (Wang et al., NeurIPS 2020): normalise each client's delta by its effective step count.

Local training is plain cross-entropy; the server divides each delta by a_i (local steps, corrected
for the clients' SGD momentum) and rescales by the sample-weighted mean of a_i
(raytune_fl.aggregators.fednova). One round equals FedAvg's whenever all clients took the same
number of steps, e.g. equal client sizes; with unequal sizes the two differ by design.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from raytune_fl.methods.base import Method, MethodContext, MethodSpec, Stateless
from raytune_fl.methods.registry import register


def build(params: dict[str, Any], context: MethodContext) -> Method:
    from raytune_fl.aggregators.fednova import effective_steps, fednova

    effective_steps(0, context.momentum)  # refuses a momentum outside [0, 1) before any training
    return Method(SPEC.name, (), Stateless(partial(fednova, momentum=context.momentum)))


SPEC = register(
    MethodSpec(
        "fednova",
        {},
        build,
        summary="deltas normalised by effective local steps (momentum-corrected), rescaled by their mean",
        as_fedavg=None,  # equals FedAvg only when every client takes the same number of steps (tested apart)
        central_privacy="its server normalises each delta by that client's step count",
    )
)
