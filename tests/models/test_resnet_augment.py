from __future__ import annotations

import pytest
import torch
from torch import nn

from raytune_fl.engine.augment import AugmentSpec, augment_batch
from raytune_fl.models import MODELS, build_model
from raytune_fl.models.simple_cnn import parameter_count

# ----------------------------------------------------------------------------------------------- models


@pytest.mark.parametrize("name", ["resnet18", "resnet50"])
@pytest.mark.parametrize(("channels", "size", "classes"), [(3, (32, 32), 10), (1, (16, 16), 7)])
def test_resnet_shapes(name, channels, size, classes):
    assert name in MODELS
    model = build_model(name, channels, classes, size)
    logits, z = model(torch.randn(2, channels, *size))
    assert logits.shape == (2, classes) and z.shape == (2, 256)
    assert torch.isfinite(logits).all() and (z >= 0).all()  # z is the projector output after its ReLU


@pytest.mark.parametrize(("name", "features"), [("resnet18", 512), ("resnet50", 2048)])
def test_resnet_structure(name, features):
    model = build_model(name, 1, 10, (16, 16))
    assert {n.split(".")[0] for n, _ in model.named_parameters()} == {"encoder", "projector", "classifier"}
    assert not any(isinstance(m, nn.MaxPool2d) for m in model.modules())
    assert isinstance(model.encoder.maxpool, nn.Identity) and isinstance(model.encoder.fc, nn.Identity)
    stem = model.encoder.conv1
    assert (stem.in_channels, stem.out_channels) == (1, 64) and stem.bias is None
    assert stem.kernel_size == (3, 3) and stem.stride == (1, 1) and stem.padding == (1, 1)
    # the same head as SimpleCNN, on the backbone's pooled features
    simple = build_model("simple_cnn", 1, 10, (16, 16))
    assert [type(m) for m in model.projector] == [type(m) for m in simple.projector]
    assert model.projector[0].in_features == features and model.classifier.in_features == 256
    assert model.encoder(torch.randn(2, 1, 16, 16)).shape == (2, features)


def test_resnet18_parameter_count():
    model = build_model("resnet18", 3, 10, (32, 32))
    head = parameter_count(model.projector) + parameter_count(model.classifier)
    assert head == (512 * 256 + 256) + 2 * 256 + (256 * 256 + 256) + 2 * 256 + (256 * 10 + 10)
    assert 11_100_000 < parameter_count(model.encoder) < 11_200_000  # torchvision's 11.18M less the 7x7 stem


def test_resnet_smallest_image():
    logits, z = build_model("resnet18", 3, 10, (8, 8))(torch.randn(2, 3, 8, 8))
    assert logits.shape == (2, 10) and z.shape == (2, 256)


# ---------------------------------------------------------------------------------------------- augment


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _batch(n: int = 64, seed: int = 123) -> torch.Tensor:
    return torch.randn(n, 3, 32, 32, generator=_gen(seed))


def _crop_offsets(x: torch.Tensor, out: torch.Tensor, padding: int) -> set[tuple[int, int]]:
    """Every (row, col) offset whose window of the zero-padded x equals out (brute force)."""
    padded = nn.functional.pad(x, [padding] * 4)
    height, width = x.shape[-2:]
    return {
        (dy, dx)
        for dy in range(2 * padding + 1)
        for dx in range(2 * padding + 1)
        if torch.equal(padded[..., dy : dy + height, dx : dx + width], out)
    }


def test_augment_off_is_identity_and_draws_nothing():
    x, g = _batch(), _gen()
    state = g.get_state()
    assert augment_batch(x, AugmentSpec(), g) is x
    assert torch.equal(g.get_state(), state)


def test_horizontal_flip_per_sample():
    x = _batch()
    out = augment_batch(x, AugmentSpec(horizontal_flip=True), _gen())
    assert out.shape == x.shape
    flipped = []
    for i in range(x.shape[0]):
        same, mirrored = torch.equal(out[i], x[i]), torch.equal(out[i], x[i].flip(-1))
        assert same != mirrored
        flipped.append(mirrored)
    assert any(flipped) and not all(flipped)


def test_random_crop_per_sample():
    padding, x = 4, _batch()
    out = augment_batch(x, AugmentSpec(crop_padding=padding), _gen())
    assert out.shape == x.shape and out.dtype == x.dtype
    offsets = []
    for i in range(x.shape[0]):
        found = _crop_offsets(x[i], out[i], padding)
        assert len(found) == 1, i
        offsets.append(found.pop())
    assert len(set(offsets)) > 10  # 81 possible offsets, drawn independently per sample
    assert min(o for pair in offsets for o in pair) == 0 and max(o for pair in offsets for o in pair) == 2 * padding


def test_crop_then_flip_in_that_draw_order():
    x = _batch(16)
    both = augment_batch(x, AugmentSpec(crop_padding=2, horizontal_flip=True), _gen(5))
    g = _gen(5)
    cropped = augment_batch(x, AugmentSpec(crop_padding=2), g)
    assert torch.equal(both, augment_batch(cropped, AugmentSpec(horizontal_flip=True), g))


def test_augment_reproducible_from_the_generator():
    x, spec = _batch(), AugmentSpec(crop_padding=4, horizontal_flip=True)
    assert torch.equal(augment_batch(x, spec, _gen(1)), augment_batch(x, spec, _gen(1)))
    assert not torch.equal(augment_batch(x, spec, _gen(1)), augment_batch(x, spec, _gen(2)))


@pytest.mark.parametrize(
    "layout",
    [
        lambda x: x.contiguous(memory_format=torch.channels_last),
        lambda x: x.transpose(-1, -2).contiguous().transpose(-1, -2),
        lambda x: x.repeat_interleave(2, dim=-1)[..., ::2],
    ],
    ids=["channels_last", "transposed", "strided"],
)
def test_augment_any_memory_layout(layout):
    x, spec = _batch(16), AugmentSpec(crop_padding=3, horizontal_flip=True)
    view = layout(x)
    assert torch.equal(view, x) and not view.is_contiguous()
    assert torch.equal(augment_batch(view, spec, _gen(9)), augment_batch(x, spec, _gen(9)))


def test_augment_other_shapes_and_dtypes():
    digits = torch.randint(0, 256, (8, 1, 8, 8), dtype=torch.uint8)
    out = augment_batch(digits, AugmentSpec(crop_padding=2, horizontal_flip=True), _gen())
    assert out.shape == digits.shape and out.dtype == torch.uint8
    with pytest.raises(ValueError, match="crop_padding"):
        AugmentSpec(crop_padding=-1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_augment_on_gpu_matches_cpu():
    x, spec = _batch(), AugmentSpec(crop_padding=4, horizontal_flip=True)
    out = augment_batch(x.cuda(), spec, _gen(3))
    assert out.device.type == "cuda"
    assert torch.equal(out.cpu(), augment_batch(x, spec, _gen(3)))
