"""FedGH (Zhang, Sun, Chen 2023): gradient harmonization on the server, no local term, no client state.

Paper (`fidelity: paper`): conflicting pairs of client deltas (negative inner product of the whole flattened
trainable delta) are each projected onto the normal plane of the other's original delta, in client-id order,
then the sample-weighted mean is applied; BatchNorm statistics are averaged. No setting makes it FedAvg in
general (so `as_fedavg` is None), but whenever no pair of deltas conflicts, identical updates included, its
round is FedAvg's exactly.

`fidelity: official`: FedLD's code's version, per tensor and unweighted: a plain mean in the first round, then
deltas ranked by their projection on an EMA (0.99) of past steps, highest paired with lowest, pairs projected
and summed until two remain, divided by the number of clients. The EMA is server state (checkpointed).
Both in raytune_fl.aggregators.fedgh.
"""

from __future__ import annotations

from typing import Any

from raytune_fl.methods.base import (
    PAPER_OR_OFFICIAL,
    Method,
    MethodContext,
    MethodSpec,
    Param,
    Stateless,
    hyperparameters,
)
from raytune_fl.methods.registry import register

FIDELITY = Param(str, "paper", "follow the paper or FedLD's code", name="fidelity", choices=PAPER_OR_OFFICIAL)


def build(params: dict[str, Any], context: MethodContext) -> Method:
    from raytune_fl.aggregators.fedgh import fedgh
    from raytune_fl.methods.impl.fedgh import OfficialHarmonization

    official = FIDELITY.of(params) == "official"
    return Method(SPEC.name, (), OfficialHarmonization(context.num_clients) if official else Stateless(fedgh))


SPEC = register(
    MethodSpec(
        "fedgh",
        hyperparameters(FIDELITY),
        build,
        summary="pairwise projection of conflicting client deltas, then the weighted mean",
        as_fedavg=None,
        central_privacy="its server harmonises conflicting client deltas pairwise, reading each one",
    )
)
