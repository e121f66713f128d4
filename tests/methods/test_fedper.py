"""FedPer: each client keeps its own head (classifier) across partial rounds and trains from it, the server averages
every entry (the global head is the mean of the heads), and a client's model is the global body with its own head;
the per-client entries hook it shares with FedBN, and which methods say they personalise."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from raytune_fl.methods import METHODS, build_method
from raytune_fl.methods.base import ClientContext, ClientHook, Method, Stateless
from raytune_fl.methods.fedper import SPEC
from raytune_fl.methods.impl.personal import LocalHead, classifier_keys, with_own_entries, with_own_head
from raytune_fl.methods.personal import personal_head_method
from raytune_fl.testing import check_method
from raytune_fl.weights import read_weights
from tests.support.methods import MODEL, f32, initial_weights, through_pickle, two_client_worker

HEAD = {"classifier.weight", "classifier.bias"}


class _StartRecorder(ClientHook):
    """Runs after local_head: what the model looks like when the optimiser is about to be built."""

    name = "recorder"

    def __init__(self) -> None:
        self.starts: dict[tuple[int, int], dict[str, np.ndarray]] = {}

    def on_round_start(self, ctx: ClientContext) -> None:
        self.starts[(ctx.client_id, ctx.round_index)] = read_weights(ctx.model)


def test_a_returning_client_trains_from_its_own_head_and_a_non_participant_keeps_it():
    worker = two_client_worker("fedper")
    recorder = _StartRecorder()
    assert [h.name for h in worker.method.hooks] == ["local_head"]
    worker.method = Method("fedper", (), worker.method.aggregator, hooks=(*worker.method.hooks, recorder))
    assert isinstance(worker.method.aggregator, Stateless)
    states: dict[int, dict] = {}  # what the server keeps, by client id
    weights = {0: initial_weights()}
    kept: dict[int, dict[int, dict]] = {}  # the server's states after each round
    for round_index, clients in ((1, [0, 1]), (2, [0]), (3, [1])):
        w = weights[round_index - 1]
        updates = [worker.train(c, round_index, w, state=states.get(c)) for c in clients]
        for u in updates:
            assert set(u.state) == {"local_head"} and set(u.state["local_head"]) == HEAD
            states[u.client_id] = through_pickle(u.state)
        weights[round_index] = worker.method.aggregate(w, updates)
        kept[round_index] = dict(states)
    round1 = {c: kept[1][c]["local_head"] for c in (0, 1)}

    w0, w1, w2 = weights[0], weights[1], weights[2]
    for client in (0, 1):  # first round: the global model as sent, the common initial head
        for key, value in recorder.starts[(client, 1)].items():
            assert np.array_equal(value, w0[key]), key
    # client 0 in round 2 and client 1 in round 3 (it sat round 2 out): the global body under its round-1 head
    for (client, round_index), w in {(0, 2): w1, (1, 3): w2}.items():
        start = recorder.starts[(client, round_index)]
        for key in start:
            expected = round1[client][key] if key in HEAD else w[key]
            assert np.array_equal(start[key], expected), (client, round_index, key)
    assert not np.array_equal(recorder.starts[(1, 3)]["classifier.weight"], w2["classifier.weight"])
    assert kept[2][1] is kept[1][1]  # round 2 left client 1's head as it was
    for key in HEAD:
        # the global head is the heads' mean (equal sample counts), there only to score the global model
        np.testing.assert_allclose(w1[key], (round1[0][key] + round1[1][key]) / 2, rtol=1e-6, atol=1e-7)


def test_a_clients_model_is_the_global_body_with_its_own_head():
    glob = {"encoder.0.weight": f32([1.0, 2.0]), "classifier.weight": f32([[0.5]]), "classifier.bias": f32([0.0])}
    own = {"classifier.weight": f32([[-3.0]]), "classifier.bias": f32([4.0])}
    personal = with_own_head(glob, {"local_head": own})
    assert personal.keys() == glob.keys()
    assert personal["encoder.0.weight"] is glob["encoder.0.weight"]
    assert personal["classifier.weight"].tolist() == [[-3.0]] and personal["classifier.bias"].tolist() == [4.0]
    assert with_own_head(glob, {}) == glob  # never sampled: the global head
    assert with_own_entries("other", glob, {"local_head": own}) == glob  # another hook's entries are not these
    built = build_method("fedper", {}, 10)
    assert built.personalise is with_own_head and built.phases == personal_head_method("fedper").phases
    [hook] = built.hooks
    assert isinstance(hook, LocalHead) and hook.owner == "fedper" and hook.per_sample


def test_the_head_is_the_classifiers_entries_and_another_models_head_is_refused():
    model = MODEL.build()
    assert classifier_keys(model) == ["classifier.weight", "classifier.bias"]
    ctx = ClientContext(model, 0, 2, torch.zeros(1), torch.zeros(1), lr=0.1, state={"local_head": {"fc.weight": 0}})
    with pytest.raises(ValueError, match=r"fedper: stored classifier entries \['fc.weight'\] do not match"):
        LocalHead("fedper").on_round_start(ctx)
    with pytest.raises(ValueError, match="a personal head needs `model.classifier`; Linear has none"):
        classifier_keys(torch.nn.Linear(2, 2))


def test_the_spec_personalises_and_one_fresh_round_is_fedavg():
    assert SPEC.params == {} and SPEC.as_fedavg == {} and not SPEC.sequential and not SPEC.per_sample
    assert SPEC.personalises is True and SPEC.personalises_under({})
    assert METHODS.get("fedbn").personalises_under({})
    fedpac = METHODS.get("fedpac")
    assert fedpac.personalises_under({}) and not fedpac.personalises_under({"mix": False})
    assert not METHODS.get("fedavg").personalises_under({}) and not METHODS.get("freeze").personalises_under({})


def test_fedper_passes_check_method():
    # its heads (client state) through a checkpoint bit for bit; stacked clients: tests/engine/test_client_batch.py
    check_method("fedper", client_batch=1)
