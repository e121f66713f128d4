"""FedDyn (Acar et al., ICLR 2021), the stable form of the official code: dynamic regularisation.

Each client keeps lambda_k, the sum of its own deltas Delta_k = w_k - w_t over the rounds it took part in
(per-client state, one float array per trainable parameter, kept by the round driver; zeros before its
first round). The paper's gradient state is g_k = -alpha lambda_k. Locally the cross-entropy gets the term

    alpha * ( <w, lambda_k> + (1/2) ||w - w_t||^2 )        gradient: alpha (w - w_t + lambda_k)

over trainable parameters (BatchNorm affine weights included, running statistics not). The official code
writes it as alpha <w, lambda_k - w_t> with (alpha/2)||w||^2 in the SGD weight decay: the same gradient,
but this form is 0 at the start of a client's first round, so its logged value (`term_feddyn`, without
alpha) reads as a drift. In that first round lambda_k = 0 and the term is FedProx's with mu = alpha, bit
for bit. The term goes through the loop's SGD like the cross-entropy (with its momentum, and next to the
run's own weight decay). After local training lambda_k <- lambda_k + Delta_k.

The server (raytune_fl.aggregators.feddyn) keeps D = sum of all clients' lambda_k and sets
w_{t+1} = w_t + mean_{k in S_t} Delta_k + D / M. D / M is an undamped extra step, so no alpha gives
FedAvg's round (`as_fedavg` is None): alpha = 0 with the test switch `server_correction: false` gives the
unweighted mean delta, FedAvg's round when the clients hold equal sample counts.

Options of the official code: `alpha_adaptive` gives client k the weight alpha_k = alpha * mean_n / n_k
(mean_n over all clients), so small clients are pulled harder; `clip_grad_norm` clips the gradients' 2-norm
before each step (official and FL-Simulator: 10; not in Alg. 1; 0 = off); `avg_model` also scores the plain
mean of every client's latest model ("avg", what the official example plots; a client that never took part
counts as the initial model) beside the global model ("cloud", what clients receive): logged as `avg_val_acc`,
`avg_val_loss`, `avg_test_acc`, `avg_test_loss`, with `drift_norm` = ||D/M|| (trainable entries). It keeps one
model per client on the server (in checkpoints too), so it is off by default.
"""

from __future__ import annotations

from typing import Any

from raytune_fl.methods.base import Method, MethodContext, MethodSpec, Param, active, hyperparameters
from raytune_fl.methods.registry import register

ALPHA = Param(float, 0.01, "weight of the local term, gradient alpha (w - w_t + lambda_k)", name="alpha", ge=0)
ALPHA_ADAPTIVE = Param(
    bool, False, "client k's alpha is alpha * mean_n / n_k (the official code's)", name="alpha_adaptive"
)
CLIP_GRAD_NORM = Param(
    float, 0.0, "clip the gradients' 2-norm at this (0: off; official: 10)", name="clip_grad_norm", ge=0
)
AVG_MODEL = Param(bool, False, "also score the mean of every client's latest model (official 'avg')", name="avg_model")
SERVER_CORRECTION = Param(
    bool,
    True,
    "add D/M to the mean delta (false: a test switch that leaves FedDyn's server step out)",
    name="server_correction",
)


def build(params: dict[str, Any], context: MethodContext) -> Method:
    from raytune_fl.methods.hooks import GradientClip
    from raytune_fl.methods.impl.feddyn import DynamicServer, DynamicTerm

    server = DynamicServer(context.num_clients, SERVER_CORRECTION.of(params), AVG_MODEL.of(params))
    mean_size = None
    if ALPHA_ADAPTIVE.of(params):
        if context.mean_client_size <= 0:
            raise ValueError("feddyn: alpha_adaptive needs the clients' mean sample count (MethodContext)")
        mean_size = context.mean_client_size
    clip = CLIP_GRAD_NORM.of(params)
    hooks = (GradientClip(clip),) if clip > 0 else ()
    return Method(SPEC.name, active([DynamicTerm(ALPHA.of(params), mean_size)]), server, hooks=hooks)


SPEC = register(
    MethodSpec(
        "feddyn",
        hyperparameters(ALPHA, ALPHA_ADAPTIVE, CLIP_GRAD_NORM, AVG_MODEL, SERVER_CORRECTION),
        build,
        summary="local alpha (<w, lambda_k> + ||w - w_t||^2 / 2), lambda_k += Delta_k; server w + mean Delta + D/M",
        as_fedavg=None,  # D/M is an undamped extra step: no alpha gives FedAvg's round (limit tested by hand)
        central_privacy="its server state moves with the sum of all clients' deltas over N, outside the noisy mean",
    )
)
