"""Ditto: v takes Ditto's step v - eta_p (grad F(v) + lambda (v - w^t)) beside FedAvg's untouched step of w, its
anchor stays w^t all round, and a client's personal model is its v (the global one before it has any)."""

from __future__ import annotations

import numpy as np

from raytune_fl.methods import METHODS
from raytune_fl.methods.ditto import LAMBDA, PERSONAL_LR
from raytune_fl.methods.impl.ditto import personal_model
from raytune_fl.methods.personal_model import WEIGHTS
from tests.support.personal import W0, ce_grad, one_round, step

V0 = {"classifier.weight": np.array([[0.5, 0.1], [-0.2, 0.4]]), "classifier.bias": np.array([0.0, 0.3])}


def _close(a, b):
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=1e-12, atol=1e-14, err_msg=key)


def test_one_step_moves_v_by_dittos_formula_and_w_by_fedavgs():
    w, ctx = one_round("ditto", {LAMBDA.name: 0.5, PERSONAL_LR.name: 0.2}, state={"ditto": {WEIGHTS: V0}}, lr=0.1)
    g_v = ce_grad(V0)
    expected_v = {k: V0[k] - 0.2 * (g_v[k] + 0.5 * (V0[k] - W0[k])) for k in V0}
    _close(ctx.new_state["ditto"][WEIGHTS], expected_v)
    _close(w, step(W0, ce_grad(W0), 0.1))  # FedAvg's step: v never reaches w


def test_the_pull_anchors_at_the_round_start_global_model_and_the_rate_defaults_to_the_runs():
    _, ctx = one_round("ditto", {LAMBDA.name: 2.0}, state={"ditto": {WEIGHTS: V0}}, lr=0.1, steps=2)
    v1 = {k: V0[k] - 0.1 * (ce_grad(V0)[k] + 2.0 * (V0[k] - W0[k])) for k in V0}
    v2 = {k: v1[k] - 0.1 * (ce_grad(v1)[k] + 2.0 * (v1[k] - W0[k])) for k in V0}  # w^t = W0, not w after step 1
    _close(ctx.new_state["ditto"][WEIGHTS], v2)


def test_a_new_client_starts_v_at_the_global_model_and_personalise_returns_v():
    _, ctx = one_round("ditto", {LAMBDA.name: 1.0}, lr=0.1)
    _close(ctx.new_state["ditto"][WEIGHTS], step(W0, ce_grad(W0), 0.1))  # v = w^t: the pull is 0 at the start
    global_weights = {"classifier.weight": np.zeros((2, 2)), "classifier.bias": np.zeros(2)}
    assert personal_model(global_weights, {}) == global_weights
    _close(personal_model(global_weights, {"ditto": {WEIGHTS: V0}}), V0)


def test_the_spec_personalises_and_trains_its_clients_one_at_a_time():
    spec = METHODS.get("ditto")
    assert spec.personalises_under({}) and spec.sequential and spec.per_sample and spec.as_fedavg == {}
    assert spec.defaults == {LAMBDA.name: 1.0, PERSONAL_LR.name: None}
