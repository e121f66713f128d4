"""The conformance suite: every registered method must pass it. Registering a method enrols it.

Each check runs real local training through `ClientWorker` (the path actors take) on a tiny model:
- finite local losses at the defaults;
- at the method's declared `as_fedavg` hyperparameters, one round from a fresh state is FedAvg's;
- aggregating identical client updates gives that update, and all-zero updates change nothing;
- it passes raytune_fl.testing.check_method: per-client and server state survive a trial checkpoint, bit for bit;
- every declared hyperparameter has a meaning, a default of its type within its bounds, and resolve() refuses
  an out-of-bounds value and an unknown name, naming it.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import raytune_fl.methods as methods_package
from raytune_fl.engine.local import LocalSettings
from raytune_fl.engine.worker import ClientWorker, ModelSpec, WorkerSpec
from raytune_fl.methods import METHODS, Method, MethodSpec, build_method
from raytune_fl.methods.base import Param, hyperparameters
from raytune_fl.testing import check_method
from raytune_fl.types import ClientUpdate, Weights, is_float_entry
from raytune_fl.weights import read_weights

SETTINGS = LocalSettings(epochs=1, batch_size=16, lr=0.05, momentum=0.9, weight_decay=1e-4)
MODEL = ModelSpec("simple_cnn", 1, 10, (8, 8))
CLIENTS = 3
# methods whose server adds a step of its own on top of the mean delta (so identical updates do not give that
# update) and that no setting makes FedAvg: the test switch that leaves that step out for the identical-updates
# check. The step itself is checked by hand in the method's tests (FedDyn's D/M: tests/methods/test_feddyn.py).
WITHOUT_SERVER_STEP: dict[str, dict[str, Any]] = {"feddyn": {"server_correction": False}}


def _data() -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(90, 1, 8, 8)).astype(np.float32)
    y = rng.integers(0, 10, 90).astype(np.int64)
    y[:30] = rng.integers(0, 3, 30)  # label skew: client 0 sees three classes only
    sizes = [30, 40, 20]
    return x, y, np.split(np.arange(90), np.cumsum(sizes)[:-1])


DATA = _data()


def _initial() -> Weights:
    torch.manual_seed(0)
    return read_weights(MODEL.build())


def _worker(name: str, params: dict[str, Any]) -> ClientWorker:
    return ClientWorker(WorkerSpec(MODEL, name, params, SETTINGS, seed=0), *DATA)


def _server(name: str, params: dict[str, Any]) -> Method:
    return build_method(name, params, _worker(name, params).spec.method_context(CLIENTS))


def _round(worker: ClientWorker, server: Method, weights: Weights, round_index: int, states: dict) -> list:
    payload = server.aggregator.payload()
    return [worker.train(cid, round_index, weights, payload, states.get(cid)) for cid in range(CLIENTS)]


def _assert_same_weights(a: Weights, b: Weights, exact: bool = True) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if exact or not is_float_entry(a[key]):
            assert np.array_equal(a[key], b[key]), key
        else:
            np.testing.assert_allclose(a[key], b[key], rtol=1e-5, atol=1e-7, err_msg=key)


def _clone(update: ClientUpdate, client_id: int, num_samples: int, zero: bool = False) -> ClientUpdate:
    delta = {k: np.zeros_like(v) if zero else v.copy() for k, v in update.delta.items()}
    return ClientUpdate(
        client_id, num_samples, update.num_steps, delta, dict(update.buffers), dict(update.metrics),
        update.state, dict(update.extras),
    )  # fmt: skip


@pytest.mark.parametrize("name", METHODS.names())
class TestMethodConformance:
    def test_defaults_build_and_train_with_finite_losses(self, name):
        worker = _worker(name, {})
        update = worker.train(0, 1, _initial())
        epochs = sum(SETTINGS.epochs if p.epochs is None else p.epochs for p in worker.method.phases)
        assert update.num_steps == 2 * epochs  # 30 samples, batch 16: 16 + 14 an epoch (FedPAC: two phases)
        assert update.metrics and all(np.isfinite(v) for v in update.metrics.values()), update.metrics
        assert all(np.isfinite(v).all() for v in update.delta.values())
        expected_terms = {f"term_{t.name}" for t in worker.method.terms}
        assert {k for k in update.metrics if k.startswith("term_")} == expected_terms

    def test_declared_fedavg_setting_gives_fedavgs_round(self, name):
        params = METHODS.get(name).as_fedavg
        if params is None:
            pytest.skip(f"{name} declares no setting that equals FedAvg")
        weights = _initial()
        reference = _round(_worker("fedavg", {}), _server("fedavg", {}), weights, 1, {})
        server = _server(name, dict(params))
        updates = _round(_worker(name, dict(params)), server, weights, 1, {})
        for ours, theirs in zip(updates, reference):  # client side: bit-identical local training
            _assert_same_weights(ours.delta, theirs.delta)
            assert ours.num_steps == theirs.num_steps
        expected = _server("fedavg", {}).aggregate(weights, reference)
        _assert_same_weights(server.aggregate(weights, updates), expected, exact=False)

    def test_aggregating_identical_updates_gives_that_update(self, name):
        params = dict(METHODS.get(name).as_fedavg or WITHOUT_SERVER_STEP.get(name, {}))
        weights = _initial()
        one = _worker(name, params).train(0, 1, weights)
        same = [_clone(one, cid, n) for cid, n in enumerate([30, 40, 20])]
        merged = _server(name, params).aggregate(weights, same)
        target = {k: weights[k] + one.delta[k] if k in one.delta else one.buffers.get(k, weights[k]) for k in weights}
        _assert_same_weights(merged, target, exact=False)

    def test_all_zero_updates_change_nothing(self, name):
        weights = _initial()
        one = _worker(name, {}).train(0, 1, weights)
        zeros = [_clone(one, cid, n, zero=True) for cid, n in enumerate([30, 40, 20])]
        merged = _server(name, {}).aggregate(weights, zeros)
        float_keys = [k for k in weights if is_float_entry(weights[k])]
        _assert_same_weights({k: merged[k] for k in float_keys}, {k: weights[k] for k in float_keys}, exact=False)

    def test_a_method_without_a_central_privacy_reason_gets_its_round_from_the_mean_update_alone(self, name):
        # central DP hands the server one update, the (noisy) mean of the clipped deltas (engine/privacy.py): a
        # method that declares no reason against it must aggregate equally weighted updates as it does their mean
        if METHODS.get(name).central_privacy:
            pytest.skip(f"{name} declares why its server cannot run on the mean alone")
        weights = _initial()
        server = _server(name, {})
        updates = [_clone(u, u.client_id, 30) for u in _round(_worker(name, {}), server, weights, 1, {})]
        mean = {k: np.mean([u.delta[k] for u in updates], axis=0, dtype=np.float64).astype(v.dtype)
                for k, v in updates[0].delta.items()}  # fmt: skip
        alone = ClientUpdate(0, num_samples=1, num_steps=1, delta=mean, buffers={}, metrics={})
        from_all, from_mean = server.aggregate(weights, updates), _server(name, {}).aggregate(weights, [alone])
        float_keys = [k for k in weights if is_float_entry(weights[k])]
        _assert_same_weights({k: from_all[k] for k in float_keys}, {k: from_mean[k] for k in float_keys}, exact=False)

    def test_passes_check_method(self, name):
        # raytune_fl.testing.check_method, as a plugin author runs it: the state through a checkpoint (two rounds
        # uninterrupted equal two resumed after round 1, bit for bit, attributes included) and the round driver's
        # per-round metrics across a resume. Its client_batch part is left to tests/engine/test_client_batch.py,
        # which checks every batchable method on more clients (sizes down to 1, budgets, augmentation)
        check_method(name, client_batch=1)

    def test_unknown_hyperparameter_is_refused_with_the_known_ones(self, name):
        known = ", ".join(METHODS.get(name).defaults) or "(none)"
        with pytest.raises(ValueError, match=re.escape(f"no hyperparameter bogus; its hyperparameters: {known}")):
            build_method(name, {"bogus": 1}, 10)

    def test_every_hyperparameter_declares_a_meaning_and_a_default_it_allows(self, name):
        spec = METHODS.get(name)
        assert set(spec.derived) <= set(spec.params), "a derived rule for an undeclared hyperparameter"
        for key, param in spec.params.items():
            assert isinstance(param, Param) and param.type in (float, int, str, bool), key
            assert param.meaning.strip() and "\n" not in param.meaning, f"{key}: no one-line meaning"
            if param.default is None:  # derived from the data: the spec says how
                assert key in spec.derived, f"{key}: a None default needs a `derived` rule"
            else:
                assert param.accepts(param.default), f"{key}: default {param.default!r} is not {param.allowed()}"
        assert spec.resolve({}) == spec.defaults
        assert spec.resolve(dict(spec.as_fedavg or {})) == {**spec.defaults, **(spec.as_fedavg or {})}

    def test_the_asynchronous_flag_says_whether_the_built_method_buffers_arrivals(self, name):
        # config reads the flag (no build, no torch) to refuse a round deadline for an asynchronous method
        assert METHODS.get(name).asynchronous == (build_method(name, {}, 10).buffer_size is not None)

    def test_resolve_refuses_an_out_of_bounds_value_and_an_unknown_name_naming_them(self, name):
        spec = METHODS.get(name)
        with pytest.raises(ValueError, match=r"no hyperparameter bogus; its hyperparameters"):
            spec.resolve({"bogus": 1})
        for key, value in _outside(spec.params).items():
            with pytest.raises(ValueError, match=rf"^{re.escape(key)}: must be .* \(got {re.escape(repr(value))}\)$"):
                spec.resolve({key: value})


def _outside(params: dict[str, Param]) -> dict[str, Any]:
    """For each hyperparameter, one value it does not allow: past a bound, outside the choices, of another type."""
    out: dict[str, Any] = {}
    for key, param in params.items():
        if param.ge is not None:
            out[key] = param.type(param.ge - 1)
        elif param.gt is not None:
            out[key] = param.type(param.gt)
        elif param.le is not None:
            out[key] = param.type(param.le + 1)
        elif param.lt is not None:
            out[key] = param.type(param.lt)
        elif param.choices is not None:
            out[key] = "not-a-choice" if param.type is str else object()
        else:
            out[key] = "not-a-bool" if param.type is bool else 1.5j
    return out


METHODS_FOLDER = Path(methods_package.__file__).parent


def test_every_registered_method_is_the_spec_its_own_module_defines():
    """`METHODS` declares each name with its module, raytune_fl/methods/<name>.py; that module's SPEC is the spec
    registered, under the same name."""
    for name in METHODS.names():
        module = importlib.import_module(f"raytune_fl.methods.{name}")
        assert isinstance(module.SPEC, MethodSpec) and module.SPEC.name == name, name
        assert METHODS.get(name) is module.SPEC, name


def test_every_method_module_is_registered_and_every_impl_module_belongs_to_one():
    """A module with a SPEC or a build but no declared name would never be built; an impl/<name>.py goes with the
    method (or family: fedopt.py) module <name>.py that builds from it."""
    with_code = {
        path.stem
        for path in METHODS_FOLDER.glob("*.py")
        if re.search(r"^(def build\(|SPEC = )", path.read_text(encoding="utf-8"), re.MULTILINE)
    }
    assert with_code == set(METHODS.names())
    impl = {path.stem for path in (METHODS_FOLDER / "impl").glob("*.py")} - {"__init__"}
    assert impl <= {path.stem for path in METHODS_FOLDER.glob("*.py")}, "impl/<name>.py without a <name>.py"


def test_no_method_reads_a_hyperparameter_by_a_bare_name():
    """A hyperparameter's name is written once, in its Param; code reads the value through it (`MU.of(params)`)."""
    bare = re.compile(r"""params(\.get)?[\[(]\s*["']""")
    found = [
        f"{path.relative_to(METHODS_FOLDER)}:{number}: {line.strip()}"
        for path in sorted(METHODS_FOLDER.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if bare.search(line)
    ]
    assert found == []


def test_a_param_reads_its_value_under_its_declared_name_typed():
    mu = Param(float, 0.01, "weight", name="mu", ge=0)
    assert mu.of({"mu": 2}) == 2.0 and isinstance(mu.of({"mu": 2}), float)  # YAML writes 2 for 2.0
    assert mu.get({}, 0.5) == 0.5 and mu.get({"mu": 1.5}, 0.5) == 1.5
    sigma = Param(float, "median", "width", name="sigma", gt=0, special=("median",))
    assert sigma.of({"sigma": "median"}) == "median"  # a special value comes back as it is
    flag = Param(bool, False, "switch", name="flag")
    assert flag.of({"flag": True}) is True
    assert list(hyperparameters(mu, flag)) == ["mu", "flag"]
    with pytest.raises(ValueError, match="unique"):
        hyperparameters(mu, mu)
    with pytest.raises(ValueError, match="not declared under their own names"):
        MethodSpec("x", {"nu": mu}, lambda params, context: None)  # type: ignore[arg-type,return-value]
