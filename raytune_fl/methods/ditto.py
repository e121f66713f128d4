"""Ditto (Li, Hu, Beirami & Smith, ICML 2021): a personal model v_k per client, pulled towards the global model,
beside FedAvg's global model. Official code: github.com/litian96/ditto, flearn/trainers_MTL/ditto.py.

What the paper's Algorithm 1 does, and the code does:
- the global model w: each sampled client trains it on its local objective F_k from the w^t it was sent, and the
  server averages the results (FedAvg). Here: the loop's cross-entropy, untouched, and FedAvg's aggregator, so
  `as_fedavg = {}` holds exactly (the personal term hands the loop a value without a gradient to w);
- the personal model v_k: v <- v - eta_p (grad F_k(v) + lambda (v - w^t)), w^t the global model received this
  round (frozen for the round); v persists across the client's rounds (client state the server keeps, numpy);
- evaluation: each client's v_k on its held-out samples (`personalise`; a client not trained yet uses w).

Deviations, labelled:
- (steps) v takes its steps on the same batches as w, one for each of w's: the paper's box runs s local iterations
  of v of their own. The official code (trainers_MTL/ditto.py) does what is done here: per local iteration, one
  step of v, then one of w, on the same batch.
- (v's start) a client's v starts at the global model of its first round; the official code starts every v at
  w^0. Both are the global model for a client first trained in round 1.
- (personal_lr) v's rate defaults to the run's client rate, as the official code steps v and w at one rate.
- (buffers) v keeps BatchNorm running statistics of its own (its forward updates them, never w's).
- (dynamic lambda) the official option to pick lambda per client from {0.1, 1, 2} on validation loss is not here.
"""

from __future__ import annotations

from typing import Any

from raytune_fl.methods.base import Method, MethodContext, MethodSpec, Param, Stateless, hyperparameters
from raytune_fl.methods.registry import register

# 1: the official scripts' value (run_*_ditto_lam1.sh); its dynamic choice picks from {0.1, 1, 2}
LAMBDA = Param(
    float, 1.0, "lambda: the pull of each personal model v towards the global model w^t", name="lambda", ge=0
)
PERSONAL_LR = Param(float, None, "the personal model's SGD rate eta_p", name="personal_lr", gt=0)


def build(params: dict[str, Any], context: MethodContext) -> Method:
    from raytune_fl.aggregators import fedavg
    from raytune_fl.methods.impl.ditto import DittoPersonal, personal_model

    term = DittoPersonal(LAMBDA.of(params), PERSONAL_LR.of(params))
    return Method(SPEC.name, (term,), Stateless(fedavg), personalise=personal_model)


SPEC = register(
    MethodSpec(
        "ditto",
        hyperparameters(LAMBDA, PERSONAL_LR),
        build,
        summary="a personal model per client: v <- v - eta_p (grad F(v) + lambda (v - w^t)); w is FedAvg's",
        derived={PERSONAL_LR.name: "the run's client learning rate (the official code steps v and w at one rate)"},
        as_fedavg={},  # w trains on plain cross-entropy and the server is FedAvg's: v never reaches them
        sequential="each client trains a second model (v) with its own step, which stacked clients do not carry",
        per_sample="v's gradients are neither clipped nor noised, and the server keeps v as client state",
        personalises=True,
    )
)
