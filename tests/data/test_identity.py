"""What a run records of its data (data/identity.py), as the MLflow dataset input shows it: the class count, one
image's shape, the layout read from the source, the split sizes, and where the data was read from."""

from __future__ import annotations

import json

import numpy as np

from raytune_fl.config import ExperimentConfig
from raytune_fl.engine.data import data_identity_of, prepare_data
from raytune_fl.tracking.tracker import dataset_input

PARTITION = {"kind": "iid", "clients": 2, "min_size": 1, "seed": 0}


def test_an_npz_runs_profile_holds_classes_shape_layout_and_split_sizes(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "mine.npz"
    np.savez(path, x_train=rng.integers(0, 256, (40, 28, 28, 1), dtype=np.uint8), y_train=np.arange(40) % 4,
             x_test=rng.integers(0, 256, (8, 28, 28, 1), dtype=np.uint8), y_test=np.arange(8) % 4)  # fmt: skip
    base = ExperimentConfig(dataset="npz", dataset_options={"path": str(path)}, partition=PARTITION, batch_size=8)
    identity = data_identity_of(base, prepare_data(base))
    profile = {**identity.profile, "partition": None}
    assert profile == {
        "train_samples": 36,  # 40 less each client's validation share: 2 of 20
        "val_samples": 4,
        "test_samples": 8,
        "clients": 2,
        "num_classes": 4,
        "image_shape": [1, 28, 28],  # as the model sees one image: channels first
        "layout": "nhwc",  # as the file held them (detected)
        "partition": None,
    }
    assert identity.source == {"dataset": "mine", "options": {"path": str(path)}}  # read from a file, not embedded
    dataset = dataset_input(identity).dataset  # what MLflow stores and its UI shows
    assert json.loads(dataset.profile) == identity.profile and dataset.name == "mine/iid/2-clients"
    declared = base.model_copy(update={"dataset_options": {"path": str(path), "layout": "nhwc"}})
    again = data_identity_of(declared, prepare_data(declared))
    assert again.digest == identity.digest and again.source["options"]["layout"] == "nhwc"


def test_an_embedded_datasets_profile_has_no_layout():
    base = ExperimentConfig(dataset="digits", partition=PARTITION)
    identity = data_identity_of(base, prepare_data(base))
    assert identity.profile["num_classes"] == 10 and identity.profile["image_shape"] == [1, 8, 8]
    assert "layout" not in identity.profile and identity.source == {"dataset": "digits", "embedded": True}
    assert identity.profile["train_samples"] + identity.profile["val_samples"] == 1437
