"""weights.load_weights: the copies load_state_dict makes, in place, without its per-module walk; load_state_dict
itself (and its errors) wherever a model or the weights could make the two differ."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from raytune_fl.models import build_model
from raytune_fl.weights import load_weights, read_weights


def _pair() -> tuple[nn.Module, nn.Module, dict[str, np.ndarray]]:
    torch.manual_seed(0)
    source = build_model("simple_cnn", 3, 10, (8, 8))
    with torch.no_grad():  # running statistics and a counter that differ from a fresh model's
        source(torch.randn(4, 3, 8, 8))
    torch.manual_seed(1)
    return build_model("simple_cnn", 3, 10, (8, 8)), build_model("simple_cnn", 3, 10, (8, 8)), read_weights(source)


def test_it_copies_what_load_state_dict_copies_into_the_models_own_tensors():
    fast, reference, weights = _pair()
    own = {name: p for name, p in fast.named_parameters()}
    load_weights(fast, weights)
    reference.load_state_dict({key: torch.from_numpy(value) for key, value in weights.items()})
    for (key, mine), theirs in zip(fast.state_dict().items(), reference.state_dict().values()):
        assert torch.equal(mine, theirs), key
        assert np.array_equal(mine.numpy(), weights[key]), key
    assert int(fast.state_dict()["encoder.1.num_batches_tracked"]) == 1
    assert all(p is own[name] and p.requires_grad for name, p in fast.named_parameters())  # in place


def test_weights_that_do_not_fit_get_load_state_dicts_error_naming_the_key():
    model, _, weights = _pair()
    wrong = {**weights, "classifier.bias": np.zeros(3, dtype=np.float32)}
    with pytest.raises(RuntimeError, match="size mismatch for classifier.bias"):
        load_weights(model, wrong)
    missing = {key: value for key, value in weights.items() if key != "classifier.bias"}
    with pytest.raises(RuntimeError, match='Missing key\\(s\\) in state_dict: "classifier.bias"'):
        load_weights(model, missing)


def test_a_model_with_its_own_loading_goes_through_load_state_dict():
    model, _, weights = _pair()
    seen: list[str] = []

    def pre_hook(state_dict, prefix, *args) -> None:
        seen.append(prefix)
        state_dict[prefix + "bias"] = state_dict[prefix + "bias"] + 1  # what a loader of its own may do

    model.classifier._register_load_state_dict_pre_hook(pre_hook)
    load_weights(model, weights)
    assert seen == ["classifier."]
    np.testing.assert_array_equal(model.classifier.bias.detach().numpy(), weights["classifier.bias"] + 1)
