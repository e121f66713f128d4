"""The models registry's conformance: every registered model builds for the inputs it declares, returns
(logits, representation) and learns. A new model without a case here fails `test_every_model_has_a_case`."""

from __future__ import annotations

import pytest
import torch

import raytune_fl.models  # noqa: F401  (registers the models)
from raytune_fl.models.registry import MODELS, TEXT_MODELS, build_model

# ---- models: factory(in_channels, num_classes, image_size) -> forward returns (logits, representation) ---------

MODEL_INPUTS = {
    "simple_cnn": [(1, 28), (3, 32)],
    "simple_cnn_gn": [(1, 28), (3, 32)],
    "resnet18": [(3, 32)],
    "resnet50": [(3, 32)],
    "char_lstm": [(80, 5)],  # text: (vocabulary size, sequence length L); a batch is (n, L) token ids
}


def test_every_model_has_a_case():
    assert set(MODELS.names()) == set(MODEL_INPUTS), "add the new model to MODEL_INPUTS"


@pytest.mark.parametrize("name", MODELS.names())
def test_a_model_returns_logits_and_a_representation_and_learns(name):
    for channels, size in MODEL_INPUTS[name]:
        torch.manual_seed(0)
        shape = (1, size) if name in TEXT_MODELS else (size, size)
        model = build_model(name, channels, 7, shape)
        initial = {k: v.clone() for k, v in model.state_dict().items()}
        x = torch.randint(0, channels, (4, size)) if name in TEXT_MODELS else torch.randn(4, channels, size, size)
        y = torch.tensor([0, 1, 2, 6])
        logits, z = model(x)
        assert logits.shape == (4, 7) and z.dim() == 2 and z.shape[0] == 4, (logits.shape, z.shape)
        assert torch.isfinite(logits).all() and torch.isfinite(z).all()
        torch.nn.functional.cross_entropy(logits, y).backward()
        trainable = [p for p in model.parameters() if p.requires_grad]
        assert trainable and all(p.grad is not None for p in trainable), "a parameter gets no gradient"
        torch.manual_seed(0)  # same seed, same initial weights: every method and variant starts alike
        again = build_model(name, channels, 7, shape)
        assert all(torch.equal(initial[k], v) for k, v in again.state_dict().items())
