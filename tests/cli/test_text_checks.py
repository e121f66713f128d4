"""The data checks before Ray (cli/common.py check_data, check_modality) on a text dataset: LEAF Shakespeare with
char_lstm passes and gives one client per speaker; an image model, image augmentation, an explicit channels_last,
an image-only method, or char_lstm on images are refused, the field first."""

from __future__ import annotations

import pytest

from raytune_fl.cli.common import check_data
from raytune_fl.config import ConfigError, ExperimentConfig
from tests.support.data_files import next_characters, write_leaf

TEXT = "to be or not to be, that is the question. " * 2


def shakespeare(tmp_path, **overrides) -> ExperimentConfig:
    """Three speakers of a repeated line (windows of 10 characters), clients by speaker, char_lstm."""
    for split in ("train", "test"):
        x, y = next_characters(TEXT, 10)
        write_leaf(tmp_path / "shakespeare" / "data" / split, {f"S{i}": (x[i::3], y[i::3]) for i in range(3)})
    return ExperimentConfig.model_validate({
        "dataset": "leaf",
        "dataset_options": {"path": str(tmp_path / "shakespeare")},
        "model": "char_lstm",
        "partition": {"kind": "flwr", "partitioner": "NaturalIdPartitioner", "options": {"partition_by": "writer_id"}},
        "batch_size": 8,
        "resources": {"actors": 0},
        **overrides,
    })  # fmt: skip


def test_shakespeare_with_char_lstm_passes_with_one_client_per_speaker(tmp_path):
    data = check_data(shakespeare(tmp_path), ["fedavg", "univarfl", "feduv", "moon", "fedld", "fedprox"])
    # 74 windows, speakers S0, S1, S2 take every third: 25, 25, 24
    assert data.num_clients == 3 and sorted(len(p) for p in data.client_parts) == [24, 25, 25]
    assert data.dataset.x_train.shape == (74, 10) and data.dataset.num_classes == 80


@pytest.mark.parametrize(
    ("overrides", "methods", "first"),
    [
        ({"model": "simple_cnn"}, (), "base.model: simple_cnn needs images, and dataset 'shakespeare' holds text"),
        ({"augment": {"horizontal_flip": True}}, (), "base.augment: crops and flips are image augmentations, and"),
        ({"resources": {"actors": 0, "channels_last": True}}, (), "base.resources.channels_last: NHWC is a layout"),
        ({}, ("fedavg", "fedalign"), "method 'fedalign' runs only on an image model (its term re-runs the final"),
        ({}, ("fedbn",), "method 'fedbn' runs only on an image model (it keeps each client's BatchNorm layers"),
    ],
)
def test_what_needs_images_is_refused_on_text_naming_the_field(tmp_path, overrides, methods, first):
    with pytest.raises(ConfigError) as error:
        check_data(shakespeare(tmp_path, **overrides), methods)
    assert str(error.value).startswith(first), str(error.value)


def test_char_lstm_on_images_is_refused_naming_base_model():
    experiment = ExperimentConfig.model_validate({"dataset": "digits", "model": "char_lstm"})
    with pytest.raises(ConfigError) as error:
        check_data(experiment)
    assert str(error.value) == (
        "base.model: char_lstm reads token ids (text), and dataset 'digits' holds images (N, C, H, W); use one of "
        "resnet18, resnet50, simple_cnn, simple_cnn_gn"
    )
