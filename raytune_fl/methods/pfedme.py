"""pFedMe, personalized FL with Moreau envelopes (T. Dinh, Tran & Nguyen, NeurIPS 2020): a personal model theta
per client, near the local model w. Official code: github.com/CharlieDinh/pFedMe, FLAlgorithms/users/userpFedMe.py
and servers/serverbase.py.

What the paper's Algorithm 1 does, and the code does, per local step on a batch D:
- the personal model theta ~ argmin_theta f(theta; D) + (lambda / 2) ||theta - w||^2, solved approximately by K
  (`inner_steps`) SGD steps at `personal_lr`, w the client's local model as it stands at the step; theta starts
  at the global model w^t each round and carries over from one batch to the next, as in the official code;
- the local model w <- w - eta lambda (w - theta), eta the run's client learning rate. Here: the personal term's
  `after_backward` overwrites w's gradient with lambda (w - theta) and the loop's optimiser takes the step; the
  loop's cross-entropy gradient on w is computed and discarded (run momentum and weight decay, when set, act on
  this gradient as on any other);
- the server: w <- (1 - beta) w_t + beta * mean_i w_i (aggregators/pfedme.py; beta = 1 is FedAvg's mean);
- evaluation: each client's theta after its last local step (client state, numpy; `personalise`).

Deviations, labelled:
- (mean) the server's mean is sample-weighted, as the official code's; the paper writes the plain mean.
- (steps) a local step is one batch of the run's epochs (all the client's batches, shuffled), where the official
  code's R local rounds each draw the next batch of a loader: the same batches, counted in epochs here.
- (buffers) theta keeps BatchNorm running statistics of its own (its forward updates them, never w's).
- (all clients) the official code trains every client each round and aggregates the sampled ones; here only the
  sampled clients train (the paper's box).
"""

from __future__ import annotations

from typing import Any

from raytune_fl.methods.base import Method, MethodContext, MethodSpec, Param, Stateless, hyperparameters
from raytune_fl.methods.registry import register

# the official main.py's defaults
LAMBDA = Param(float, 15.0, "lambda: the Moreau envelope's pull between theta and w", name="lambda", gt=0)
INNER_STEPS = Param(int, 5, "K: SGD steps on theta per local step", name="inner_steps", ge=1)
PERSONAL_LR = Param(float, 0.09, "the SGD rate of theta's K inner steps", name="personal_lr", gt=0)
BETA = Param(float, 1.0, "beta: the server's step towards the clients' mean (1: FedAvg's mean)", name="beta", gt=0)


def build(params: dict[str, Any], context: MethodContext) -> Method:
    from functools import partial

    from raytune_fl.aggregators.pfedme import pfedme
    from raytune_fl.methods.impl.pfedme import MoreauPersonal, personal_model

    term = MoreauPersonal(LAMBDA.of(params), INNER_STEPS.of(params), PERSONAL_LR.of(params))
    return Method(SPEC.name, (term,), Stateless(partial(pfedme, beta=BETA.of(params))), personalise=personal_model)


SPEC = register(
    MethodSpec(
        "pfedme",
        hyperparameters(LAMBDA, INNER_STEPS, PERSONAL_LR, BETA),
        build,
        summary="theta ~ argmin f(theta) + lambda/2 ||theta - w||^2 by K steps, w <- w - eta lambda (w - theta)",
        as_fedavg=None,  # w's gradient is lambda (w - theta), never the cross-entropy's
        sequential="each client trains a second model (theta) with K steps of its own per step, which stacked "
        "clients do not carry",
        per_sample="theta's gradients are neither clipped nor noised, and w's gradient is replaced by "
        "lambda (w - theta)",
        personalises=True,
    )
)
