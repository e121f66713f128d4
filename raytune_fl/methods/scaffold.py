"""SCAFFOLD, option II (Karimireddy et al., ICML 2020): control variates correct client drift.

Each local step uses g(w) - c_i + c instead of g(w), where c_i is this client's control variate
(per-client state) and c the server's (broadcast as the payload). After K local steps:

    c_i+ = c_i - c + (w_t - w) / (K * lr)        (K: the effective step count a_K with momentum, below)

The client keeps c_i+ and sends c_i+ - c_i; the server moves c by |S|/N times the mean of those
deltas. The weights are aggregated as FedAvg's sample-weighted mean (the paper: unweighted mean,
global step 1). From a fresh state (c = c_i = 0) one round is exactly FedAvg's.

With client SGD momentum the correction still enters through the gradient, and K is replaced by
the momentum-effective step count a_K (FedNova's): with K it diverges at rho = 0.9, see
raytune_fl.aggregators.scaffold. Without momentum a_K = K, the paper's rule.
"""

from __future__ import annotations

from typing import Any

from raytune_fl.methods.base import Method, MethodContext, MethodSpec
from raytune_fl.methods.registry import register


def build(params: dict[str, Any], context: MethodContext) -> Method:
    from raytune_fl.aggregators.fednova import effective_steps
    from raytune_fl.methods.impl.scaffold import ScaffoldCorrection, ScaffoldServer

    effective_steps(0, context.momentum)  # refuses a momentum outside [0, 1) before any training
    return Method(SPEC.name, (), ScaffoldServer(context.num_clients), hooks=(ScaffoldCorrection(context.momentum),))


SPEC = register(
    MethodSpec(
        "scaffold",
        {},
        build,
        summary="control variates c, c_i correct each local gradient by c - c_i (option II)",
        as_fedavg={},  # fresh state: c = c_i = 0, so no correction and FedAvg's aggregation
        central_privacy="its server also reads each client's control-variate change, outside the clip and noise",
    )
)
