"""FedAdagrad, FedAdam, FedYogi: the adaptive server step by hand on tiny arrays, through the pure function and
through the registered methods' ServerAggregator; the BatchNorm buffer rule; state through a checkpoint."""

from __future__ import annotations

import math

import numpy as np
import pytest

from raytune_fl.aggregators.fedavg import fedavg
from raytune_fl.aggregators.fedopt import ServerRule, fedopt, mean_delta, second_moment, step_size
from raytune_fl.engine.checkpoint import load_state, save_state
from raytune_fl.methods import METHODS, build_method
from raytune_fl.methods.fedopt import FEDAVG_LIMIT
from raytune_fl.types import ClientUpdate
from tests.support.resume_check import small_federation, straight_and_resumed, untimed

RULES = {"fedadagrad": "adagrad", "fedadam": "adam", "fedyogi": "yogi"}


def _f32(values) -> np.ndarray:
    return np.asarray(values, np.float32)


def _update(cid: int, n: int, delta: dict, buffers: dict | None = None, dtype=np.float32) -> ClientUpdate:
    return ClientUpdate(cid, n, 1, {k: np.asarray(v, dtype) for k, v in delta.items()}, buffers or {}, {})


def _random_updates(seed: int, count: int = 4, scale: float = 0.1) -> list[ClientUpdate]:
    """|delta| <= scale everywhere, unequal sample counts."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 60, count)
    return [
        _update(cid, int(sizes[cid]), {"w": rng.uniform(-scale, scale, (3, 2)), "b": rng.uniform(-scale, scale, 2)})
        for cid in range(count)
    ]


GLOBAL = {"w": _f32(np.arange(6).reshape(3, 2)), "b": _f32([0.5, -0.5])}


# --- the scalar worked check ----------------------------------------------------------------------------

# w_0 = 0, Delta_1 = Delta_2 = 0.1, eta = 0.1, beta1 = 0.9, beta2 = 0.99, tau = 1e-3 (FedAdagrad: beta1 = 0).
#
# FedAdam: m_1 = 0.1 * 0.1 = 0.01, v_1 = 0.01 * 0.01 = 1e-4, w_1 = 0.1 * 0.01 / (0.01 + 0.001) = 0.090909;
#   m_2 = 0.009 + 0.01 = 0.019, v_2 = 0.99e-4 + 1e-4 = 1.99e-4, sqrt = 0.0141067,
#   w_2 = w_1 + 0.1 * 0.019 / 0.0151067 = 0.090909 + 0.125772 = 0.216681.
# FedYogi: v_1 = 0 - 0.01 * 0.01 * sign(0 - 0.01) = 1e-4 (= Adam's), w_1 = 0.090909;
#   v_2 = 1e-4 - 1e-4 * sign(1e-4 - 0.01) = 2e-4, sqrt = 0.0141421,
#   w_2 = w_1 + 0.1 * 0.019 / 0.0151421 = 0.090909 + 0.125478 = 0.216387.
# FedAdagrad (beta1 = 0): m = Delta, v_1 = 0.01, w_1 = 0.1 * 0.1 / 0.101 = 0.099010;
#   v_2 = 0.02, sqrt = 0.141421, w_2 = w_1 + 0.01 / 0.142421 = 0.099010 + 0.070214 = 0.169224.
# FedAdam, keras correction: step = eta sqrt(1 - 0.99^t) / (1 - 0.9^t): t = 1: eta * 0.1 / 0.1 = eta, w_1 = 0.090909;
#   t = 2: eta * sqrt(0.0199) / 0.19 = 0.742460 eta, w_2 = 0.090909 + 0.742460 * 0.125772 = 0.184290.
# FedAdam, flower correction (exponent t + 1): round 1 scaled by 0.742460, w_1 = 0.067496;
#   round 2: sqrt(1 - 0.99^3) / (1 - 0.9^3) = 0.172340 / 0.271 = 0.635942, w_2 = 0.067496 + 0.079984 = 0.147480.
WORKED = [
    ("fedadam", {}, 0.090909, 0.216681),
    ("fedyogi", {}, 0.090909, 0.216387),
    ("fedadagrad", {}, 0.099010, 0.169224),
    ("fedadam", {"bias_correction": "keras"}, 0.090909, 0.184290),
    ("fedadam", {"bias_correction": "flower"}, 0.067496, 0.147480),
]
SCALAR = {"server_lr": 0.1, "tau": 1e-3}


@pytest.mark.parametrize(("name", "extra", "w1", "w2"), WORKED)
def test_scalar_worked_check_through_the_aggregator_function(name, extra, w1, w2):
    beta1 = 0.0 if name == "fedadagrad" else 0.9
    kwargs = {"rule": RULES[name], "server_lr": 0.1, "beta1": beta1, "beta2": 0.99, "tau": 1e-3, **extra}
    w0 = {"w": np.zeros(1)}
    first, m, v = fedopt(w0, [_update(0, 1, {"w": [0.1]}, dtype=np.float64)], {}, {}, 1, ServerRule(**kwargs))
    second, _, _ = fedopt(first, [_update(0, 1, {"w": [0.1]}, dtype=np.float64)], m, v, 2, ServerRule(**kwargs))
    assert first["w"][0] == pytest.approx(w1, abs=1e-6)
    assert second["w"][0] == pytest.approx(w2, abs=1e-6)


@pytest.mark.parametrize(("name", "extra", "w1", "w2"), WORKED)
def test_scalar_worked_check_through_the_method(name, extra, w1, w2):
    method = build_method(name, {**SCALAR, **extra}, 10)
    first = method.aggregate({"w": np.zeros(1)}, [_update(0, 1, {"w": [0.1]}, dtype=np.float64)])
    second = method.aggregate(first, [_update(3, 5, {"w": [0.1]}, dtype=np.float64)])
    assert first["w"][0] == pytest.approx(w1, abs=1e-6)
    assert second["w"][0] == pytest.approx(w2, abs=1e-6)
    assert method.aggregator.state_dict()["t"] == 2


def test_bias_correction_factors():
    assert step_size(0.1, 0.9, 0.99, 1, "none") == 0.1
    assert step_size(0.1, 0.9, 0.99, 1, "keras") == pytest.approx(0.1)  # sqrt(0.01) / 0.1 = 1
    assert step_size(1.0, 0.9, 0.99, 2, "keras") == pytest.approx(math.sqrt(0.0199) / 0.19)  # 0.742460
    assert step_size(1.0, 0.9, 0.99, 1, "flower") == pytest.approx(0.742460, abs=1e-6)  # one round off
    with pytest.raises(ValueError, match="counted from 1"):
        step_size(1.0, 0.9, 0.99, 0, "keras")


# --- the first round, Yogi's sign rule, the weighting ---------------------------------------------------


@pytest.mark.parametrize("name", list(RULES))
def test_first_round_closed_form(name):
    # from m = v = 0: Adam and Yogi give w_0 + eta (1 - b1) D / (sqrt(1 - b2) |D| + tau),
    # Adagrad gives w_0 + eta (1 - b1) D / (|D| + tau)
    eta, b1, b2, tau = 0.3, 0.5, 0.9, 0.01
    params = {"server_lr": eta, "beta1": b1, "tau": tau, **({} if name == "fedadagrad" else {"beta2": b2})}
    updates = _random_updates(7)
    d = mean_delta(updates)  # unweighted (the paper)
    scale = 1.0 if name == "fedadagrad" else math.sqrt(1 - b2)
    new = build_method(name, params, 10).aggregate(GLOBAL, updates)
    for key in GLOBAL:
        expected = GLOBAL[key] + eta * (1 - b1) * d[key].astype(np.float64) / (scale * np.abs(d[key]) + tau)
        np.testing.assert_allclose(new[key], expected, rtol=1e-6)


def test_yogi_sign_rule_by_hand():
    # Delta^2 = 0.25 in every coordinate, beta2 = 0.75, so (1 - b2) Delta^2 = 0.0625 (all exact in binary):
    #   v_prev = 1 > 0.25: v shrinks additively, 1 - 0.0625 = 0.9375          (Adam: 0.75 + 0.0625 = 0.8125)
    #   v_prev = 0.125 < 0.25: v grows, 0.125 + 0.0625 = 0.1875               (Adam: 0.09375 + 0.0625 = 0.15625)
    #   v_prev = 0.25 = Delta^2: sign(0) = 0, v stays 0.25                    (Adam: 0.1875 + 0.0625 = 0.25)
    v_prev = np.array([1.0, 0.125, 0.25])
    delta = np.array([0.5, -0.5, 0.5])
    yogi = [0.9375, 0.1875, 0.25]
    assert second_moment("yogi", v_prev, delta, 0.75).tolist() == yogi
    assert second_moment("adam", v_prev, delta, 0.75).tolist() == [0.8125, 0.15625, 0.25]
    assert second_moment("adagrad", v_prev, delta, 0.75).tolist() == [1.25, 0.375, 0.5]
    # through the method's state: a Yogi server holding that v, beta1 = 0 (m = Delta): w = Delta / (sqrt(v) + tau)
    method = build_method("fedyogi", {"server_lr": 1.0, "beta1": 0.0, "beta2": 0.75, "tau": 1e-3}, 10)
    method.aggregator.load_state_dict({"m": {}, "v": {"w": v_prev}, "t": 4})
    new = method.aggregate({"w": np.zeros(3)}, [_update(0, 1, {"w": delta}, dtype=np.float64)])
    assert method.aggregator.v["w"].tolist() == yogi
    np.testing.assert_allclose(new["w"], delta / (np.sqrt(yogi) + 1e-3), rtol=1e-12)  # [0.515865, -1.152040, 0.998004]
    # a zero delta on a zero v: sign(0) = 0 keeps v at 0 and the step is 0 / tau = 0, no NaN
    assert second_moment("yogi", np.zeros(1), np.zeros(1), 0.99)[0] == 0.0


def test_deltas_are_unweighted_by_default_and_sample_weighted_as_an_option():
    # clients with n = 1 and 3, deltas 0.4 and 0: unweighted mean 0.2, sample-weighted 0.1.
    # FedAdagrad, beta1 = 0, eta = 1, tau = 0.1: w = D / (|D| + 0.1): 0.2 / 0.3 = 0.666667 and 0.1 / 0.2 = 0.5
    updates = [_update(0, 1, {"w": [0.4]}, dtype=np.float64), _update(1, 3, {"w": [0.0]}, dtype=np.float64)]
    params = {"server_lr": 1.0, "tau": 0.1}
    uniform = build_method("fedadagrad", params, 10).aggregate({"w": np.zeros(1)}, updates)
    samples = build_method("fedadagrad", {**params, "weighting": "samples"}, 10).aggregate({"w": np.zeros(1)}, updates)
    assert uniform["w"][0] == pytest.approx(2 / 3)
    assert samples["w"][0] == pytest.approx(0.5)


# --- FedAvg is a limit ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(RULES))
def test_fedavg_limit_matches_fedavg_to_1e_6_relative(name):
    # beta1 = 0, tau = eta = 1e6, sample weights: w + D / (1 + sqrt(v) / 1e6), |D| <= 0.1, over three rounds
    assert METHODS.get(name).as_fedavg == FEDAVG_LIMIT
    method = build_method(name, dict(FEDAVG_LIMIT), 10)
    weights = {key: value.astype(np.float64) for key, value in GLOBAL.items()}
    for seed in range(3):
        updates = [_update(u.client_id, u.num_samples, u.delta, dtype=np.float64) for u in _random_updates(seed)]
        ours = method.aggregate(weights, updates)
        theirs = fedavg(weights, updates)
        for key in weights:
            np.testing.assert_allclose(ours[key] - weights[key], theirs[key] - weights[key], rtol=1e-6, atol=0)
        weights = theirs


# --- BatchNorm buffers --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(RULES))
def test_batchnorm_statistics_are_averaged_and_num_batches_tracked_copied(name):
    w0 = {
        "bn.weight": _f32([1.0]),
        "bn.running_mean": _f32([0.5]),
        "bn.running_var": _f32([1.0]),
        "bn.num_batches_tracked": np.array(10, np.int64),
    }

    def client(cid, n, mean, var, tracked):
        buffers = {"bn.num_batches_tracked": np.array(tracked, np.int64)}
        return _update(cid, n, {"bn.weight": [0.1], "bn.running_mean": [mean], "bn.running_var": [var]}, buffers)

    # listed out of order: the lowest client id's num_batches_tracked (12) is kept, never summed or averaged.
    # running_mean: 1/4 * 4 + 3/4 * 0 = 1 (sample-weighted, not the unweighted 2); running_var: 1/4 (-0.8) = -0.2.
    # A sign-like adaptive step (eta = 1, tau = 1e-9) would move running_var by about -1 to 0 or below.
    updates = [client(2, 3, 0.0, 0.0, 13), client(1, 1, 4.0, -0.8, 12)]
    method = build_method(name, {"server_lr": 1.0, "tau": 1e-9}, 10)
    new = method.aggregate(w0, updates)
    np.testing.assert_allclose(new["bn.running_mean"], [1.5], rtol=1e-6)
    np.testing.assert_allclose(new["bn.running_var"], [0.8], rtol=1e-6)
    assert new["bn.num_batches_tracked"].dtype == np.int64 and int(new["bn.num_batches_tracked"]) == 12
    assert new["bn.weight"][0] > 1.5  # the trainable weight did take the (sign-like, about eta) adaptive step
    state = method.aggregator.state_dict()
    assert set(state["m"]) == set(state["v"]) == {"bn.weight"}  # no moments for statistics or integer buffers


# --- state -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("fedadagrad", {"beta1": 0.5}),
        ("fedadam", {"bias_correction": "keras"}),
        ("fedyogi", {"bias_correction": "keras"}),
    ],
)
def test_state_survives_a_checkpoint_and_the_next_round_is_identical(tmp_path, name, params):
    live = build_method(name, params, 10)
    weights = GLOBAL
    for seed in range(2):
        weights = live.aggregate(weights, _random_updates(seed))
    save_state({"aggregator": live.aggregator.state_dict(), "weights": weights}, tmp_path)
    loaded = load_state(tmp_path)
    restored = build_method(name, params, 10)
    restored.aggregator.load_state_dict(loaded["aggregator"])
    assert restored.aggregator.t == 2  # the bias correction's step count came back too
    for key in ("m", "v"):
        for k, value in live.aggregator.state_dict()[key].items():
            assert restored.aggregator.state_dict()[key][k].dtype == value.dtype
            assert np.array_equal(restored.aggregator.state_dict()[key][k], value)
    fresh = build_method(name, params, 10)  # without the state the next round differs
    third = _random_updates(2)
    expected = live.aggregate(weights, third)
    resumed = restored.aggregate(loaded["weights"], third)
    for key in expected:
        assert np.array_equal(expected[key], resumed[key]), key
    assert not np.allclose(fresh.aggregate(weights, third)["w"], expected["w"])
    assert restored.aggregator.t == live.aggregator.t == 3


def test_a_restored_federation_continues_exactly(tmp_path):
    experiment = small_federation(3)
    params = {"bias_correction": "keras"}
    straight, rest, resumed = straight_and_resumed(experiment, "fedadam", params, tmp_path)
    assert [r["round"] for r in rest] == [2, 3]
    assert untimed(rest) == untimed(straight[1:])


# --- hyperparameters ---------------------------------------------------------------------------------------


def test_defaults_and_options():
    assert METHODS.get("fedadam").defaults == {
        "server_lr": 0.01, "beta1": 0.9, "beta2": 0.99, "tau": 0.001, "weighting": "uniform", "bias_correction": "none"
    }  # fmt: skip
    assert METHODS.get("fedyogi").defaults["bias_correction"] == "none"
    assert METHODS.get("fedadagrad").defaults == {"server_lr": 0.1, "beta1": 0.0, "tau": 0.01, "weighting": "uniform"}
    with pytest.raises(ValueError, match=r"bias_correction: must be one of 'none', 'keras' \(got 'flower'\)"):
        build_method("fedyogi", {"bias_correction": "flower"}, 10)  # Flower corrects FedAdam only
    with pytest.raises(ValueError, match="no hyperparameter beta2"):
        build_method("fedadagrad", {"beta2": 0.99}, 10)  # Adagrad has no second-moment decay
    with pytest.raises(ValueError, match=r"tau: must be a number > 0"):
        build_method("fedadam", {"tau": 0.0}, 10)
    with pytest.raises(ValueError, match="bias_correction for yogi"):
        server = ServerRule(rule="yogi", server_lr=1, beta1=0, beta2=0.9, tau=1, bias_correction="flower")
        fedopt(GLOBAL, _random_updates(0), {}, {}, 1, server)


def test_the_step_size_diagnostic_by_hand():
    # v = (0, 1, 4), eta = 0.1, tau = 0.01: steps 0.1 / (0 + 0.01) = 10, 0.1 / 1.01, 0.1 / 2.01
    server = build_method("fedadagrad", {"server_lr": 0.1, "tau": 0.01}, 10).aggregator
    assert server.metrics() == {}
    server.v = {"a": np.array([0.0, 1.0]), "b": np.array([4.0])}
    assert server.metrics() == pytest.approx({"server_step_median": 0.1 / 1.01, "server_step_max": 10.0})
