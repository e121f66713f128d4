"""APFL, adaptive personalized FL (Deng, Kamani & Mahdavi 2020, arXiv:2003.13461): each client mixes a personal
model with the global one, alpha v + (1 - alpha) w, and learns alpha. Official code: github.com/MLOPTPSU/FedTorch,
fedtorch/comms/trainings/federated/apfl.py.

What the paper's Algorithm 1 does, and the code does, per local step on a batch:
- w_i <- w_i - eta grad f_i(w_i): the global model's own step, the loop's cross-entropy, untouched (FedAvg's local
  training; the server is FedAvg's, so `as_fedavg = {}` holds exactly);
- v_i <- v_i - eta_v grad_v f_i(v_bar_i), with v_bar_i = alpha_i v_i + (1 - alpha_i) w_i the mixed model, its
  parameters mixed (the paper's form); by the chain rule grad_v f(v_bar) = alpha grad f(v_bar);
- alpha_i <- alpha_i - eta_alpha <v_i - w_i, grad f_i(v_bar_i)> (`adaptive`), clipped to [0, 1];
- evaluation: each client's v_bar_i = alpha_i v_i + (1 - alpha_i) w (`personalise`).
v_i and alpha_i are client state the server keeps between the client's rounds (numpy).

Deviations, labelled:
- (official form) the official code mixes the two models' outputs, alpha f(v; x) + (1 - alpha) f(w; x), updates
  alpha once per round (at its first step) with a 0.02 alpha regulariser, and starts alpha at 0.5 with adaptive
  off; here the paper's parameter mix, alpha updated at every step, no regulariser, adaptive on by default.
- (v's start) a client's v starts at the global model of its first round (the paper's and the code's: w^0).
- (rates) v's and alpha's rates default to the run's client rate: the paper's box uses one eta_t for all three.
- (buffers) the mixed model's BatchNorm running statistics are v's own (the mixed forward updates them, never w's).
"""

from __future__ import annotations

from typing import Any

from raytune_fl.methods.base import Method, MethodContext, MethodSpec, Param, Stateless, hyperparameters
from raytune_fl.methods.registry import register

ALPHA = Param(float, 0.5, "alpha: the personal model's initial share of the mix (the official default)", name="alpha",
              ge=0, le=1)  # fmt: skip
ADAPTIVE = Param(bool, True, "alpha learnt by its gradient (the paper's box); false: fixed at `alpha`",
                 name="adaptive")  # fmt: skip
PERSONAL_LR = Param(float, None, "the personal model v's SGD rate", name="personal_lr", gt=0)
ALPHA_LR = Param(float, None, "alpha's SGD rate (with `adaptive`)", name="alpha_lr", gt=0)


def build(params: dict[str, Any], context: MethodContext) -> Method:
    from raytune_fl.aggregators import fedavg
    from raytune_fl.methods.impl.apfl import ApflPersonal, mixed_model

    term = ApflPersonal(ALPHA.of(params), ADAPTIVE.of(params), PERSONAL_LR.of(params), ALPHA_LR.of(params))
    return Method(SPEC.name, (term,), Stateless(fedavg), personalise=mixed_model)


SPEC = register(
    MethodSpec(
        "apfl",
        hyperparameters(ALPHA, ADAPTIVE, PERSONAL_LR, ALPHA_LR),
        build,
        summary="each client mixes a personal model with the global one, alpha v + (1 - alpha) w; alpha learnt",
        derived={
            PERSONAL_LR.name: "the run's client learning rate (the paper's one eta_t)",
            ALPHA_LR.name: "the run's client learning rate (the paper's one eta_t)",
        },
        as_fedavg={},  # w trains on plain cross-entropy and the server is FedAvg's: v and alpha never reach them
        sequential="each client trains a second model (v) and its alpha with their own step, which stacked clients "
        "do not carry",
        per_sample="v's and alpha's gradients are neither clipped nor noised, and the server keeps them as client "
        "state",
        personalises=True,
    )
)
