"""APFL: one step moves v by alpha grad f(v_bar) and alpha by <v - w, grad f(v_bar)> (clipped to [0, 1]), v_bar the
parameter mix alpha v + (1 - alpha) w; w takes FedAvg's untouched step; the personal model is the mix."""

from __future__ import annotations

import numpy as np
import pytest

from raytune_fl.methods import METHODS
from raytune_fl.methods.apfl import ADAPTIVE, ALPHA, ALPHA_LR, PERSONAL_LR
from raytune_fl.methods.impl.apfl import ALPHA_KEY, mixed_model
from raytune_fl.methods.personal_model import WEIGHTS
from tests.support.personal import W0, ce_grad, one_round, step

V0 = {"classifier.weight": np.array([[0.5, 0.1], [-0.2, 0.4]]), "classifier.bias": np.array([0.0, 0.3])}


def _close(a, b):
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=1e-12, atol=1e-14, err_msg=key)


def test_one_step_moves_v_and_alpha_by_their_gradients_at_the_mixed_model():
    params = {ALPHA.name: 0.5, PERSONAL_LR.name: 0.2, ALPHA_LR.name: 0.3}
    w, ctx = one_round("apfl", params, state={"apfl": {WEIGHTS: V0, ALPHA_KEY: 0.25}}, lr=0.1)
    alpha = 0.25  # the client's own, not the initial 0.5
    mixed = {k: alpha * V0[k] + (1 - alpha) * W0[k] for k in V0}
    g = ce_grad(mixed)
    _close(ctx.new_state["apfl"][WEIGHTS], {k: V0[k] - 0.2 * alpha * g[k] for k in V0})
    alpha_grad = sum(float(((V0[k] - W0[k]) * g[k]).sum()) for k in V0)
    assert ctx.new_state["apfl"][ALPHA_KEY] == pytest.approx(alpha - 0.3 * alpha_grad, rel=1e-6)
    _close(w, step(W0, ce_grad(W0), 0.1))  # FedAvg's step: neither v nor alpha reaches w


def test_a_fixed_alpha_stays_and_an_adaptive_one_is_clipped_to_the_unit_interval():
    state = {"apfl": {WEIGHTS: V0, ALPHA_KEY: 0.25}}
    _, fixed = one_round("apfl", {ADAPTIVE.name: False, ALPHA_LR.name: 1e6}, state=state)
    assert fixed.new_state["apfl"][ALPHA_KEY] == 0.25
    mixed = {k: 0.25 * V0[k] + 0.75 * W0[k] for k in V0}
    sign = np.sign(sum(float(((V0[k] - W0[k]) * ce_grad(mixed)[k]).sum()) for k in V0))
    _, clipped = one_round("apfl", {ALPHA_LR.name: 1e6}, state=state)
    assert clipped.new_state["apfl"][ALPHA_KEY] == (0.0 if sign > 0 else 1.0)


def test_a_new_client_starts_at_the_initial_alpha_with_v_the_global_model():
    _, ctx = one_round("apfl", {ALPHA.name: 0.75, ADAPTIVE.name: False}, lr=0.1)
    # v = w^t: the mix is w^t itself, and v's step is alpha times cross-entropy's gradient there
    _close(ctx.new_state["apfl"][WEIGHTS], {k: W0[k] - 0.1 * 0.75 * ce_grad(W0)[k] for k in W0})
    assert ctx.new_state["apfl"][ALPHA_KEY] == 0.75


def test_the_personal_model_mixes_parameters_and_keeps_the_clients_own_statistics():
    w = {"fc.weight": np.array([1.0, 2.0], np.float32), "bn.running_mean": np.array([5.0], np.float32),
         "bn.num_batches_tracked": np.array(3)}  # fmt: skip
    v = {"fc.weight": np.array([3.0, -2.0], np.float32), "bn.running_mean": np.array([7.0], np.float32),
         "bn.num_batches_tracked": np.array(9)}  # fmt: skip
    mixed = mixed_model(w, {"apfl": {WEIGHTS: v, ALPHA_KEY: 0.25}})
    np.testing.assert_allclose(mixed["fc.weight"], [0.25 * 3 + 0.75 * 1, 0.25 * -2 + 0.75 * 2])
    assert mixed["fc.weight"].dtype == np.float32
    assert mixed["bn.running_mean"].tolist() == [7.0] and int(mixed["bn.num_batches_tracked"]) == 9
    assert mixed_model(w, {}) == w


def test_the_spec_personalises_and_trains_its_clients_one_at_a_time():
    spec = METHODS.get("apfl")
    assert spec.personalises_under({}) and spec.sequential and spec.per_sample and spec.as_fedavg == {}
