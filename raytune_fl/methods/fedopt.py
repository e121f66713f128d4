"""FedAdagrad, FedAdam, FedYogi (Reddi et al., ICLR 2021, Alg. 2): an adaptive optimiser on the server.

Clients run plain local training (cross-entropy, no state); the server treats minus the clients' mean
delta as a gradient and takes an Adagrad / Adam / Yogi step on it (raytune_fl/aggregators/fedopt.py has
the update rules, the options and what the official code and Flower do differently):

    m <- beta1 m + (1 - beta1) Delta;   v <- rule(v, Delta^2);   w <- w + server_lr m / (sqrt(v) + tau)

m, v and the step count t are server state (state_dict, checkpointed). Defaults: the paper's betas
(0.9, 0.99; FedAdagrad without momentum, as the official runs and Flower) and its best CIFAR-10
server_lr and tau; v starts at 0 (official); no bias correction (paper; "keras" = official runs).

No setting is FedAvg exactly. `as_fedavg` declares the limit beta1 = 0, tau = server_lr = 1e6 with
sample weighting: FedAvg's round up to a relative error of sqrt(v) / tau, below 1e-7 for |Delta| <= 0.1.
BatchNorm running statistics always get FedAvg's mean, never the adaptive step.

The family's module: the three methods' hyperparameters, their shared build and `server_optimiser_spec`, which
makes each method's spec from its rule. Each method is a module of its own (fedadagrad.py, fedadam.py, fedyogi.py:
its SPEC, declaring only its rule, summary and defaults); the server is impl/fedopt.py.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, cast

from raytune_fl.aggregators.fedopt import BIAS_CORRECTIONS, WEIGHTINGS, Rule
from raytune_fl.methods.base import Method, MethodContext, MethodSpec, Param, hyperparameters

if TYPE_CHECKING:
    from raytune_fl.aggregators.fedopt import BiasCorrection, Weighting

# FedAdam's and FedYogi's defaults; FedAdagrad declares its own (`server_optimiser_spec`'s `defaults`)
SERVER_LR = Param(float, 0.01, "eta: the server step size", name="server_lr", gt=0)
BETA1 = Param(float, 0.9, "decay of the first moment m (0: no server momentum)", name="beta1", ge=0, lt=1)
BETA2 = Param(float, 0.99, "decay of the second moment v", name="beta2", ge=0, lt=1)
TAU = Param(float, 0.001, "adaptivity: added to sqrt(v) in the step's denominator", name="tau", gt=0)
WEIGHTING = Param(
    str,
    "uniform",
    "clients' deltas averaged unweighted (paper) or by sample count",
    name="weighting",
    choices=WEIGHTINGS,
)
_BIAS_CORRECTION = Param(
    str, "none", "none (paper), keras (official runs), flower (Flower's FedAdam)", name="bias_correction"
)

# FedAvg's limit: no momentum, tau far above |Delta|, server_lr = tau (server step 1), sample-weighted mean
FEDAVG_LIMIT = {BETA1.name: 0.0, SERVER_LR.name: 1e6, TAU.name: 1e6, WEIGHTING.name: "samples"}


def bias_correction(rule: Rule) -> Param[str]:
    """The bias corrections `rule` offers (a method with one only, FedAdagrad, declares no choice)."""
    return dataclasses.replace(_BIAS_CORRECTION, choices=BIAS_CORRECTIONS[rule])


def build_server_optimiser(rule: Rule, params: dict[str, Any], context: MethodContext) -> Method:
    """FedAdagrad, FedAdam or FedYogi (`rule`: each method's spec's `build` passes its own)."""
    from raytune_fl.methods.impl.fedopt import AdaptiveServer

    # Param.of types a choice as str; the spec's choices checked the literal
    weighting = cast("Weighting", WEIGHTING.of(params))
    correction = cast("BiasCorrection", _BIAS_CORRECTION.get(params, "none"))
    server = AdaptiveServer(
        rule, SERVER_LR.of(params), BETA1.of(params), BETA2.get(params, 0.0), TAU.of(params),
        weighting, correction,
    )  # fmt: skip
    return Method(f"fed{rule}", (), server)


def server_optimiser_spec(rule: Rule, summary: str, **defaults: float) -> MethodSpec:
    """The spec of fed<rule>, for its module's `SPEC = register(server_optimiser_spec(...))`.

    Its hyperparameters are the family's, in one order (server_lr, beta1, beta2, tau, weighting, bias_correction),
    less those its rule has no use for: Adagrad's v has no decay (no beta2), and a rule with one bias correction
    offers no choice. `defaults` replaces the family's defaults by name (FedAdagrad's own).
    """
    declared: list[Param[Any]] = [SERVER_LR, BETA1, *([BETA2] if rule != "adagrad" else []), TAU, WEIGHTING]
    if len(BIAS_CORRECTIONS[rule]) > 1:
        declared.append(bias_correction(rule))
    unknown = set(defaults) - {param.name for param in declared}
    if unknown:
        raise ValueError(f"fed{rule} has no hyperparameter {', '.join(sorted(unknown))} to give a default")
    own = [dataclasses.replace(p, default=defaults[p.name]) if p.name in defaults else p for p in declared]

    def build(params: dict[str, Any], context: MethodContext) -> Method:
        return build_server_optimiser(rule, params, context)

    return MethodSpec(f"fed{rule}", hyperparameters(*own), build, summary, as_fedavg=dict(FEDAVG_LIMIT))
