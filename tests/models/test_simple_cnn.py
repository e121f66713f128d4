from __future__ import annotations

import pytest
import torch

from raytune_fl.models import MODELS, build_model
from raytune_fl.models.simple_cnn import parameter_count
from raytune_fl.registry import UnknownNameError


def test_simple_cnn_matches_the_workload_model():
    model = build_model("simple_cnn", 1, 10, (28, 28))
    assert parameter_count(model) == 161_306  # docs/explanation/workload.md#model
    names = {name.split(".")[0] for name, _ in model.named_parameters()}
    assert names == {"encoder", "projector", "classifier"}
    logits, z = model(torch.randn(4, 1, 28, 28))
    assert logits.shape == (4, 10) and z.shape == (4, 256)
    assert (z >= 0).all()  # z is the projector output after its final ReLU


@pytest.mark.parametrize(("channels", "size", "classes"), [(1, (8, 8), 10), (3, (32, 32), 100), (3, (96, 96), 10)])
def test_simple_cnn_any_image_size(channels, size, classes):
    model = build_model("simple_cnn", channels, classes, size)
    logits, z = model(torch.randn(2, channels, *size))
    assert logits.shape == (2, classes) and z.shape == (2, 256)
    assert torch.isfinite(logits).all()


def test_unknown_model_lists_known():
    with pytest.raises(
        UnknownNameError, match="unknown model 'resnet999'; known: char_lstm, resnet18, resnet50, simple_cnn"
    ):
        MODELS.get("resnet999")


def test_simple_cnn_gn_is_simple_cnn_with_group_norm_that_normalises_each_sample_alone():
    torch.manual_seed(0)
    plain, grouped = build_model("simple_cnn", 1, 10, (28, 28)), build_model("simple_cnn_gn", 1, 10, (28, 28))
    # GroupNorm's affine weight and bias replace BatchNorm's: the same 161,306 parameters, no running statistics
    assert parameter_count(grouped) == parameter_count(plain) == 161_306
    kinds = [type(m).__name__ for m in grouped.modules() if "Norm" in type(m).__name__]
    assert kinds == ["GroupNorm"] * 10 and list(grouped.buffers()) == []
    assert [p.shape for p in grouped.parameters()] == [p.shape for p in plain.parameters()]
    x = torch.randn(3, 1, 28, 28)
    together, alone = grouped.train()(x)[0], grouped(x[1:2])[0]  # train mode: no sample sees another
    torch.testing.assert_close(together[1:2], alone, rtol=1e-5, atol=1e-6)
