"""pFedMe: theta takes K steps on f(theta) + lambda/2 ||theta - w||^2 from w^t, w steps by lr lambda (w - theta),
theta is the client's personal model, and the server moves beta of the way to the clients' weighted mean."""

from __future__ import annotations

import numpy as np

from raytune_fl.aggregators.pfedme import pfedme
from raytune_fl.methods import METHODS
from raytune_fl.methods.impl.pfedme import personal_model
from raytune_fl.methods.personal_model import WEIGHTS
from raytune_fl.methods.pfedme import BETA, INNER_STEPS, LAMBDA, PERSONAL_LR
from tests.support.methods import f32, update
from tests.support.personal import W0, ce_grad, one_round

ELSEWHERE = {"classifier.weight": np.full((2, 2), 9.0), "classifier.bias": np.full(2, 9.0)}


def _close(a, b):
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=1e-12, atol=1e-14, err_msg=key)


def _inner(theta, w, lam, lr):
    g = ce_grad(theta)
    return {k: theta[k] - lr * (g[k] + lam * (theta[k] - w[k])) for k in theta}


def test_w_steps_by_lr_lambda_w_minus_theta_after_k_inner_steps_from_the_global_model():
    params = {LAMBDA.name: 3.0, INNER_STEPS.name: 3, PERSONAL_LR.name: 0.05}
    # a stored theta is not where it starts: each round starts at w^t (the official code's)
    w, ctx = one_round("pfedme", params, state={"pfedme": {WEIGHTS: ELSEWHERE}}, lr=0.1)
    theta = dict(W0)
    for _ in range(3):
        theta = _inner(theta, W0, 3.0, 0.05)
    _close(ctx.new_state["pfedme"][WEIGHTS], theta)
    _close(w, {k: W0[k] - 0.1 * 3.0 * (W0[k] - theta[k]) for k in W0})  # cross-entropy's gradient dropped


def test_theta_carries_over_to_the_next_step_and_pulls_to_the_current_w():
    params = {LAMBDA.name: 2.0, INNER_STEPS.name: 1, PERSONAL_LR.name: 0.05}
    w, ctx = one_round("pfedme", params, lr=0.1, steps=2)
    theta1 = _inner(W0, W0, 2.0, 0.05)
    w1 = {k: W0[k] - 0.1 * 2.0 * (W0[k] - theta1[k]) for k in W0}
    theta2 = _inner(theta1, w1, 2.0, 0.05)
    _close(ctx.new_state["pfedme"][WEIGHTS], theta2)
    _close(w, {k: w1[k] - 0.1 * 2.0 * (w1[k] - theta2[k]) for k in W0})


def test_the_server_moves_beta_of_the_way_to_the_weighted_mean_and_averages_statistics():
    global_weights = {"w": f32([1.0, 2.0]), "bn.running_var": f32([1.0])}
    updates = [
        update(0, 1, {"w": [4.0, 0.0], "bn.running_var": [2.0]}),
        update(1, 3, {"w": [0.0, 4.0], "bn.running_var": [6.0]}),
    ]
    # mean delta: w (1*[4,0] + 3*[0,4]) / 4 = [1, 3]; running_var (2 + 18) / 4 = 5, never scaled by beta
    merged = pfedme(global_weights, updates, beta=2.0)
    np.testing.assert_allclose(merged["w"], [1 + 2 * 1, 2 + 2 * 3])
    np.testing.assert_allclose(merged["bn.running_var"], [1 + 5])
    np.testing.assert_allclose(pfedme(global_weights, updates, beta=1.0)["w"], [2.0, 5.0])  # FedAvg's mean


def test_the_personal_model_is_the_stored_theta_and_the_spec_has_no_fedavg_setting():
    assert personal_model(W0, {}) == W0
    _close(personal_model(W0, {"pfedme": {WEIGHTS: ELSEWHERE}}), ELSEWHERE)
    spec = METHODS.get("pfedme")
    assert spec.as_fedavg is None and spec.personalises_under({}) and spec.sequential and spec.per_sample
    assert spec.defaults == {LAMBDA.name: 15.0, INNER_STEPS.name: 5, PERSONAL_LR.name: 0.09, BETA.name: 1.0}
