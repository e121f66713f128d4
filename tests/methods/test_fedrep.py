"""FedRep: the head phase trains the head alone and the body phase the body alone, the head ends where the head phase
left it, a returning client's head phase starts from its own head, `head_epochs: 0` is FedPer's round, and the spec's
declarations (the phases, the derived head rate, no local DP-SGD)."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from raytune_fl.engine.local import LocalData, train_local
from raytune_fl.methods import METHODS, build_method
from raytune_fl.methods.base import ClientContext, ClientHook, Method, Phase
from raytune_fl.methods.fedrep import HEAD_EPOCHS, HEAD_LR
from raytune_fl.testing import check_method
from raytune_fl.weights import read_weights
from tests.support.methods import MODEL, SETTINGS, initial_weights, two_client_worker

HEAD = {"classifier.weight", "classifier.bias"}


def _train(method: Method) -> tuple[dict, dict, int]:
    """`method`'s local round on 32 random samples (two steps of 16 an epoch) from MODEL's seed-0 weights."""
    torch.manual_seed(0)
    model = MODEL.build()
    before = read_weights(model)
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(32, 1, 8, 8, generator=g), torch.randint(0, 10, (32,), generator=g)
    result = train_local(model, method, LocalData(x, y, 10), SETTINGS, torch.Generator().manual_seed(1))
    assert all(p.requires_grad for p in model.parameters()) and model.training  # every phase gives back its freeze
    return before, read_weights(model), result.steps


def _changed(before: dict, after: dict) -> set[str]:
    return {k for k in before if not np.array_equal(before[k], after[k])}


def test_the_head_phase_leaves_the_body_untouched_and_the_body_phase_the_head():
    method = build_method("fedrep", {"head_epochs": 2}, 10)
    head_phase, body_phase = method.phases
    before, after, steps = _train(dataclasses.replace(method, phases=(head_phase,)))
    assert _changed(before, after) == HEAD  # BatchNorm statistics included: the body is exactly as received
    assert steps == 4  # two head epochs of two steps
    before, after, _ = _train(dataclasses.replace(method, phases=(body_phase,)))
    changed = _changed(before, after)
    assert not changed & HEAD and {"encoder.0.weight", "encoder.1.running_mean", "projector.0.weight"} <= changed
    # the whole round: the head ends exactly where the head phase left it (the body phase draws its batches after)
    head_only = _train(dataclasses.replace(method, phases=(head_phase,)))[1]
    _, whole, steps = _train(method)
    assert steps == 4 + 2
    for key in HEAD:
        assert np.array_equal(whole[key], head_only[key]), key
    assert {"encoder.0.weight", "projector.0.weight"} <= _changed(head_only, whole)


class _HeadRecorder(ClientHook):
    """Runs after local_head, before any phase: the head the client's head phase starts from."""

    name = "recorder"

    def __init__(self) -> None:
        self.heads: list[dict[str, np.ndarray]] = []

    def on_round_start(self, ctx: ClientContext) -> None:
        self.heads.append({k: v for k, v in read_weights(ctx.model).items() if k in HEAD})


def test_a_returning_client_starts_its_head_phase_from_its_own_head_and_keeps_the_trained_one():
    worker = two_client_worker("fedrep", {"head_epochs": 1})
    recorder = _HeadRecorder()
    worker.method = dataclasses.replace(worker.method, hooks=(*worker.method.hooks, recorder))
    w0 = initial_weights()
    own = {"classifier.weight": np.full_like(w0["classifier.weight"], 0.01), "classifier.bias": np.zeros(10, "f4")}
    update = worker.train(0, 2, w0, state={"local_head": own})
    for key in HEAD:
        assert np.array_equal(recorder.heads[0][key], own[key]), key
        # the head it keeps is the one it trained, from its own: w0's head plus its delta would be another model
        assert not np.array_equal(update.state["local_head"][key], own[key]), key
        np.testing.assert_allclose(update.state["local_head"][key], w0[key] + update.delta[key], atol=1e-6)
    assert update.num_steps == 2 + 2


def test_head_epochs_zero_is_fedpers_round_bit_for_bit():
    w0 = initial_weights()
    own = {"classifier.weight": np.full_like(w0["classifier.weight"], 0.01), "classifier.bias": np.zeros(10, "f4")}
    ours = two_client_worker("fedrep", {"head_epochs": 0}).train(1, 2, w0, state={"local_head": own})
    theirs = two_client_worker("fedper").train(1, 2, w0, state={"local_head": own})
    assert ours.delta.keys() == theirs.delta.keys() and ours.num_steps == theirs.num_steps == 2
    for key in ours.delta:
        assert np.array_equal(ours.delta[key], theirs.delta[key]), key
    for key in HEAD:
        assert np.array_equal(ours.state["local_head"][key], theirs.state["local_head"][key]), key


def test_the_phases_and_declarations():
    spec = METHODS.get("fedrep")
    assert spec.defaults == {"head_epochs": 10, "head_lr": None}  # tau_h = 10; the run's rate, as the official code
    assert spec.derived.keys() == {HEAD_LR.name} and spec.as_fedavg == {HEAD_EPOCHS.name: 0}
    assert spec.personalises_under({}) and spec.per_sample and not spec.sequential
    parts = [(p.trains, p.epochs, p.lr, p.terms, p.body_eval) for p in build_method("fedrep", {}, 10).phases]
    assert parts == [("classifier", 10, None, False, True), ("body", None, None, True, False)]
    method = build_method("fedrep", {"head_epochs": 3, "head_lr": 0.2}, 10)
    assert method.phases[0] == Phase("classifier", 3, 0.2, terms=False, body_eval=True)
    assert build_method("fedrep", {"head_epochs": 0}, 10).phases == (Phase(),)
    assert [h.per_sample for h in method.hooks] == [False]  # as the spec declares, whatever head_epochs


def test_fedrep_at_a_head_rate_of_its_own_passes_check_method():
    # the heads through a checkpoint bit for bit, at a head_lr other than the run's (the defaults: the conformance)
    check_method("fedrep", {"head_epochs": 1, "head_lr": 0.2}, client_batch=1)
