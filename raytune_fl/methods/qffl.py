"""q-FFL / q-FedAvg (Li, Sanjabi, Beirami & Smith, ICLR 2020): fair resource allocation.

A hook records F_k, the mean cross-entropy of the *global* model on the client's training data,
before local training; the server re-weights the client deltas by F_k^q with Li et al.'s
Lipschitz-normalised step (raytune_fl.aggregators.qffl, L = 1/lr). Our clients are weighted by
p_k = n_k / n, so q = 0 is exactly FedAvg; larger q favours clients the global model serves badly.

`lipschitz`: the step's denominator h_k needs ||grad F_k||^2. The paper plugs in the whole local update
L (w_t - w_k), which after a_k momentum-effective local steps is ~a_k gradients: the slope term grows a_k^2-fold
and the server barely moves (no learning in 20 rounds at the project's SGD momentum 0.9). `per_step` (default)
divides by a_k; `paper` keeps Algorithm 2 as written. Both are the paper's for one plain SGD step.
"""

from __future__ import annotations

from typing import Any

from raytune_fl.methods.base import Method, MethodContext, MethodSpec, Param, hyperparameters
from raytune_fl.methods.registry import register

Q = Param(float, 1.0, "fairness exponent on the global-model loss F_k^q (0: FedAvg)", name="q", ge=0)
LIPSCHITZ = Param(
    str,
    "per_step",
    "gradient estimate in the step's Lipschitz bound h_k: per_step = local update / effective local steps "
    "(momentum-corrected), paper = the whole local update, as Algorithm 2 writes it",
    name="lipschitz",
    choices=("per_step", "paper"),
)


def build(params: dict[str, Any], context: MethodContext) -> Method:
    from raytune_fl.aggregators.fednova import effective_steps
    from raytune_fl.methods.impl.qffl import GlobalLoss, QFairAggregator

    if context.lr_schedule != "constant":  # the server would step with 1/lr of a rate the clients no longer use
        raise ValueError(
            f"q-FFL's step L = 1/lr needs one client rate for the whole run; optimizer.schedule is "
            f"{context.lr_schedule!r} (use kind: constant)"
        )
    effective_steps(0, context.momentum)  # refuses a momentum outside [0, 1) before any training
    aggregator = QFairAggregator(Q.of(params), context.lr, context.momentum, LIPSCHITZ.of(params))
    return Method(SPEC.name, (), aggregator, hooks=(GlobalLoss(),))


SPEC = register(
    MethodSpec(
        "qffl",
        hyperparameters(Q, LIPSCHITZ),
        build,
        summary="q-FedAvg: client deltas re-weighted by F_k^q (global-model loss), Lipschitz step L = 1/lr",
        as_fedavg={Q.name: 0.0},
        central_privacy="its server reads each client's loss and scales each delta by it",
        per_sample="each client reports the global model's loss over all its data, which no noise covers",
    )
)
