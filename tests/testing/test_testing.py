"""raytune_fl.testing.check_method (testing/method_check.py): a method run as trials run it, its state through a
checkpoint, its clients stacked. It fails on the ways a plugin method loses state on a resume (server state in an
attribute, a hook counting rounds, a module global, a tensor in state_dict), and passes once the method follows the
contract; every example in examples/ passes it. The command-line refusal is in tests/test_plugins.py."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from raytune_fl.methods import METHODS
from raytune_fl.models import MODELS
from raytune_fl.testing import MethodCheckError, check_method
from raytune_fl.testing.method_check import (
    changed_attributes,
    check_resumed_federation,
    close,
    fingerprint,
    tiny_data,
)
from tests.support import REPO
from tests.support.plugin_sources import momentum_plugin


def plugin(folder, module: str, code: str) -> None:
    (folder / f"{module}.py").write_text(textwrap.dedent(code))
    importlib.import_module(module)


def failure(name: str, **kwargs) -> str:
    with pytest.raises(MethodCheckError) as error:
        check_method(name, **kwargs)
    return str(error.value)


def test_server_momentum_in_an_attribute_fails_and_passes_once_state_dict_carries_it(plugin_dir):
    plugin(plugin_dir, "plug_lost", momentum_plugin("mom_lost", keeps_state=False))
    message = failure("mom_lost")
    first = message.splitlines()[0]
    assert first == "method 'mom_lost' (plug_lost.py:16): its state does not survive a resume from a checkpoint"
    assert "round 2: the aggregated model differs" in message  # behaviour, not only an attribute
    assert "server: Momentum.velocity changed by aggregation and not restored by load_state_dict()" in message
    assert "state_dict()" in message and "docs/how-to/own-method.md#state-across-a-resume" in message
    # the round driver's part alone: the reported metrics of round 2 part after a resume
    dataset, data = tiny_data()
    with pytest.raises(MethodCheckError, match=r"^method 'mom_lost' \(plug_lost.py:16\): round 2's \w+ is "):
        check_resumed_federation(METHODS.get("mom_lost"), {}, "simple_cnn", dataset, data)

    plugin(plugin_dir, "plug_kept", momentum_plugin("mom_kept", keeps_state=True))
    check_method("mom_kept")  # the same rule with its velocity in state_dict: passes
    check_method(METHODS.get("mom_kept"))  # by its spec too


def test_a_hook_counting_rounds_in_an_attribute_fails_naming_it(plugin_dir):
    plugin(
        plugin_dir,
        "plug_count",
        """
        from raytune_fl import ClientHook, Method, MethodSpec, Stateless, fedavg, register_method


        class Counter(ClientHook):
            name = "counter"

            def __init__(self):
                self.rounds = 0

            def on_round_start(self, ctx):
                self.rounds += 1  # a fresh worker (a resumed trial's) starts at 0 again


        register_method(MethodSpec("counting", {}, lambda p, c: Method("counting", (), Stateless(fedavg),
                                                                        hooks=(Counter(),))))
        """,
    )
    message = failure("counting")
    assert "client: Counter.rounds kept on the hook between rounds" in message
    assert "ctx.new_state[self.name]" in message


def test_state_in_a_module_global_fails_though_no_attribute_holds_it(plugin_dir):
    plugin(
        plugin_dir,
        "plug_global",
        """
        import numpy as np
        from raytune_fl import Method, MethodSpec, ServerAggregator, apply_delta, register_method, weighted_mean_delta

        VELOCITY = {}  # shared by every build in this process, gone in a restarted trial's


        class Momentum(ServerAggregator):
            def aggregate(self, global_weights, updates):
                for k, v in weighted_mean_delta(updates).items():
                    VELOCITY[k] = np.asarray(0.9 * VELOCITY.get(k, 0) + v, v.dtype)
                return apply_delta(global_weights, dict(VELOCITY), updates)


        register_method(MethodSpec("mom_global", {}, lambda p, c: Method("mom_global", (), Momentum()),
                                   as_fedavg=None))
        """,
    )
    message = failure("mom_global")
    assert "round 1: the aggregated model differs" in message  # a second fresh build does not start fresh
    assert "state kept outside them (a module-level variable, a class attribute)" in message


def test_a_tensor_in_state_dict_cannot_be_checkpointed(plugin_dir):
    plugin(
        plugin_dir,
        "plug_tensor",
        """
        import torch
        from raytune_fl import Method, MethodSpec, Stateless, fedavg, register_method


        class Counted(Stateless):
            def state_dict(self):
                return {"seen": torch.zeros(2)}


        register_method(MethodSpec("tensor_state", {}, lambda p, c: Method("tensor_state", (), Counted(fedavg))))
        """,
    )
    message = failure("tensor_state")
    assert "its state cannot go into a trial checkpoint: cannot checkpoint a Tensor" in message


def test_an_attribute_that_carries_nothing_passes_once_called_transient(plugin_dir):
    code = """
        import time
        from raytune_fl import Method, MethodSpec, ServerAggregator, fedavg, register_method


        class Timed(ServerAggregator):
            TRANSIENT
            def aggregate(self, global_weights, updates):
                started = time.perf_counter()
                new = fedavg(global_weights, updates)
                self.took = time.perf_counter() - started  # a diagnostic: no later round reads it
                return new



        register_method(MethodSpec("NAME", {}, lambda p, c: Method("NAME", (), Timed())))
    """
    plugin(plugin_dir, "plug_timed", code.replace("NAME", "timed").replace("TRANSIENT", ""))
    assert "server: Timed.took changed by aggregation" in failure("timed", client_batch=1)
    plugin(plugin_dir, "plug_transient", code.replace("NAME", "timed_t").replace("TRANSIENT", 'transient = ("took",)'))
    check_method("timed_t", client_batch=1)


def test_a_build_that_raises_names_its_line(plugin_dir):
    plugin(
        plugin_dir,
        "plug_boom",
        """
        from raytune_fl import MethodSpec, register_method


        def build(params, context):
            raise RuntimeError("no such layer: proj")


        register_method(MethodSpec("boom", {}, build))
        """,
    )
    message = failure("boom")
    assert message == "method 'boom': build() raised RuntimeError: no such layer: proj (plug_boom.py:6)"


def test_stacked_clients_that_share_a_hooks_tensor_fail_the_client_batch_check(plugin_dir):
    # `anchor` is set per client in on_round_start and read by `loss`: stacked clients need it in `per_client`
    code = """
        from raytune_fl import LocalTerm, Method, MethodSpec, Stateless, fedavg, register_method


        class Anchor(LocalTerm):
            name = "anchor"
            per_client = PER_CLIENT

            def on_round_start(self, ctx):
                self.anchor = ctx.x.mean()

            def loss(self, batch):
                return (batch.z.mean() - self.anchor) ** 2


        register_method(MethodSpec("NAME", {}, lambda p, c: Method("NAME", (Anchor(1.0),), Stateless(fedavg))))
    """
    plugin(plugin_dir, "plug_anchor", code.replace("NAME", "anchor_shared").replace("PER_CLIENT", "()"))
    message = failure("anchor_shared")
    assert message.startswith("method 'anchor_shared' (plug_anchor.py:")
    assert "clients trained 3 at a time (resources.client_batch) differ from the same clients trained one" in message
    assert "per_client" in message
    plugin(plugin_dir, "plug_anchor_ok", code.replace("NAME", "anchor_own").replace("PER_CLIENT", '("anchor",)'))
    check_method("anchor_own")


def test_a_spec_that_is_not_registered_is_refused(plugin_dir):
    from raytune_fl import MethodSpec

    spec = MethodSpec("never_registered", {}, lambda params, context: None)
    with pytest.raises(MethodCheckError, match=r"method 'never_registered' is not registered: call register_method"):
        check_method(spec)


EXAMPLES = REPO / "examples"


def test_every_example_passes_check_method(plugin_dir):
    """Each example's plugin imported as the commands do; its methods checked, its models carrying FedAvg."""
    sys.path.extend(str(folder) for folder in sorted(EXAMPLES.iterdir()))  # plugin_dir restores sys.path
    methods, models = set(METHODS.user_names()), set(MODELS.user_names())
    for module in sorted(p.stem for p in EXAMPLES.glob("*/*.py") if not p.stem.startswith("test_")):
        importlib.import_module(module)
    new_methods, new_models = set(METHODS.user_names()) - methods, set(MODELS.user_names()) - models
    assert new_methods == {"fedtrim"} and new_models == {"tiny_mlp"}  # the scan sees the examples' names
    for name in sorted(new_methods):
        check_method(name)
    for model in sorted(new_models):
        check_method("fedavg", model=model, client_batch=1)


# ---- the comparisons, by hand


class Box:
    def __init__(self, **attributes) -> None:
        self.__dict__.update(attributes)


def test_fingerprints_compare_values_exactly_and_objects_by_their_attributes():
    a = np.array([1.0, 2.0], np.float32)
    assert fingerprint(Box(v=a, n=3)) == fingerprint(Box(v=a.copy(), n=3))  # equal state, distinct objects
    assert fingerprint(Box(v=a)) != fingerprint(Box(v=np.array([1.0, 2.0000002], np.float32)))  # one ulp apart
    assert fingerprint(Box(v=a)) != fingerprint(Box(v=a.astype(np.float64)))  # same values, other dtype
    assert fingerprint(float("nan")) == fingerprint(float("nan"))
    counter = [0]

    def closes_over():
        return counter

    before = fingerprint(closes_over)
    counter[0] += 1  # state in a closure counts
    assert fingerprint(closes_over) != before
    box = Box()
    box.me = box  # a cycle ends
    assert fingerprint(box) == fingerprint(box)


def test_changed_attributes_names_them_and_skips_transient_ones():
    class Agg:
        transient = ("took",)

        def __init__(self, velocity, took) -> None:
            self.velocity, self.took, self.beta = velocity, took, 0.9

    ours, theirs = Agg({"w": np.ones(2)}, 0.1), Agg({"w": np.zeros(2)}, 0.2)
    assert changed_attributes(ours, theirs) == ["Agg.velocity"]
    assert changed_attributes(ours, Agg({"w": np.ones(2)}, 0.3)) == []


def test_close_allows_rounding_and_names_where_values_part():
    close({"w": np.array([1.0, 2.0])}, {"w": np.array([1.0, 2.0 * (1 + 1e-9)])}, "round 1")  # 1e-9 relative: equal
    with pytest.raises(MethodCheckError, match=r"^round 1\.w: "):
        close({"w": np.array([1.0, 2.0])}, {"w": np.array([1.0, 2.001])}, "round 1")
    with pytest.raises(MethodCheckError, match=r"^round 2\[1\]: 2 items against 1"):
        close([[1, 2], [3, 4]], [[1, 2], [3]], "round 2")


def test_importing_raytune_fl_testing_imports_no_torch():
    code = "import sys, raytune_fl.testing; print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert json.loads(out.stdout.strip().replace("'", '"')) == []
    assert issubclass(MethodCheckError, AssertionError)  # a failed check reads as a failed assertion in pytest
