"""Datasets from files without code (raytune_fl/data/files.py), on tiny files in the real formats: .npz archives,
ImageFolder trees of PNG files, the files torchvision's classes read (MNIST-family idx files, CIFAR python pickles,
SVHN .mat, USPS bzip2'd libsvm). Values checked by hand; every refusal names the file or field."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from raytune_fl.config import ConfigError, ExperimentConfig, parse_space
from raytune_fl.data import DATASETS, ArrayDataset, check_options, load_dataset, to_array_dataset
from raytune_fl.data.datasets import image_layout
from tests.support import REPO, tiny_space
from tests.support.data_files import (
    BAD_DATA,
    dump,
    write_bad_data,
    write_cifar,
    write_idx,
    write_svhn,
    write_usps,
)

# ---- npz ------------------------------------------------------------------------------------------------------


def save(path, compressed=False, **arrays):
    (np.savez_compressed if compressed else np.savez)(path, **arrays)
    return str(path)


@pytest.mark.parametrize(("dtype", "compressed"), [(np.uint8, False), (np.uint8, True), (np.int64, False)])
def test_npz_integer_images_are_standardised_with_the_train_splits_statistics(tmp_path, dtype, compressed):
    x_train = np.array([[[0, 255]], [[255, 255]]], dtype=dtype)  # (2, 1, 2): two 1x2 grayscale images
    x_test = np.array([[[0, 0]]], dtype=dtype)  # int64: what np.savez makes of python lists of pixels
    path = save(tmp_path / "d.npz", compressed, x_train=x_train, y_train=[0, 1], x_test=x_test, y_test=[1])
    ds = load_dataset("npz", options={"path": path})
    # train pixels /255: 0, 1, 1, 1 -> mean 0.75, population std sqrt(0.1875)
    std = np.sqrt(0.1875)
    assert ds.x_train.shape == (2, 1, 1, 2) and ds.x_train.dtype == np.float32  # a channel added
    np.testing.assert_allclose(ds.x_train.ravel(), (np.array([0, 1, 1, 1]) - 0.75) / std, rtol=1e-6)
    np.testing.assert_allclose(ds.x_test.ravel(), (np.array([0, 0]) - 0.75) / std, rtol=1e-6)
    assert ds.y_train.tolist() == [0, 1] and ds.y_test.dtype == np.int64 and ds.num_classes == 2


def test_npz_float_images_are_used_as_given(tmp_path):
    x = np.arange(24, dtype=np.float64).reshape(2, 3, 2, 2)
    path = save(tmp_path / "f.npz", x_train=x, y_train=np.array([1, 0]), x_test=x[:1], y_test=np.array([1.0]))
    ds = load_dataset("npz", options={"path": path})
    assert ds.x_train.dtype == np.float32 and np.array_equal(ds.x_train, x.astype(np.float32))
    assert ds.in_channels == 3 and ds.num_classes == 2 and ds.y_test.tolist() == [1]  # whole floats as labels
    assert ds.layout == "nchw"  # (2, 3, 2, 2): only the second axis can hold channels


# ---- npz: the images' layout ----------------------------------------------------------------------------------


def pixels(shape):
    """uint8 images whose every value is distinct, so a wrong transpose shows."""
    return (np.arange(np.prod(shape)) % 251).astype(np.uint8).reshape(shape)


def test_npz_channels_last_images_are_detected_and_read_as_channels_first(tmp_path):
    x_train, x_test = pixels((4, 28, 28, 1)), pixels((2, 28, 28, 1))  # (N, H, W, C): one 28x28 channel
    path = save(tmp_path / "nhwc.npz", x_train=x_train, y_train=[0, 1, 0, 1], x_test=x_test, y_test=[1, 0])
    ds = load_dataset("npz", options={"path": path})
    assert ds.x_train.shape == (4, 1, 28, 28) and ds.layout == "nhwc" and ds.x_train.flags.c_contiguous
    want = load_dataset("npz", options={"path": save(tmp_path / "nchw.npz", x_train=x_train.transpose(0, 3, 1, 2),
                        y_train=[0, 1, 0, 1], x_test=x_test.transpose(0, 3, 1, 2), y_test=[1, 0])})  # fmt: skip
    assert want.layout == "nchw" and np.array_equal(ds.x_train, want.x_train) and np.array_equal(ds.x_test, want.x_test)
    rgb = pixels((3, 3, 32, 32)).astype(np.float32)  # (N, C, H, W): three 32x32 channels, read as given
    path = save(tmp_path / "rgb.npz", x_train=rgb, y_train=[0, 1, 2], x_test=rgb[:1], y_test=[2])
    ds = load_dataset("npz", options={"path": path})
    assert ds.x_train.shape == (3, 3, 32, 32) and ds.layout == "nchw" and np.array_equal(ds.x_train, rgb)


def test_npz_ambiguous_images_are_refused_until_the_layout_is_declared(tmp_path):
    x = pixels((3, 3, 3, 3)).astype(np.float32)  # 3 channels of 3x3 either way
    path = save(tmp_path / "cube.npz", x_train=x, y_train=[0, 1, 2], x_test=x[:1], y_test=[0])
    with pytest.raises(ValueError) as error:
        load_dataset("npz", options={"path": path})
    assert str(error.value) == (
        f"npz: {path}: x_train (3, 3, 3, 3) is ambiguous: (N, C, H, W) would be 3 channel(s) of 3x3 images, "
        "(N, H, W, C) 3 channel(s) of 3x3; set base.dataset_options.layout: nchw or nhwc"
    )
    first = load_dataset("npz", options={"path": path, "layout": "nchw"})
    last = load_dataset("npz", options={"path": path, "layout": "nhwc"})
    assert np.array_equal(first.x_train, x) and np.array_equal(last.x_train, x.transpose(0, 3, 1, 2))
    assert (first.layout, last.layout) == ("nchw", "nhwc")
    with pytest.raises(ConfigError, match="base.dataset_options.layout: Input should be 'nchw' or 'nhwc'"):
        parse_space(tiny_space("files", dataset="npz", dataset_options={"path": path, "layout": "hwc"}))


def test_a_declared_layout_that_does_not_fit_the_splits_is_refused(tmp_path):
    x_train, x_test = pixels((2, 8, 8, 3)), pixels((1, 3, 8, 8))  # train channels last, test channels first
    path = save(tmp_path / "mixed.npz", x_train=x_train, y_train=[0, 1], x_test=x_test, y_test=[1])
    with pytest.raises(ValueError, match=r"x_train images are \(3, 8, 8\) but x_test's \(8, 3, 8\)"):
        load_dataset("npz", options={"path": path})


def test_a_declared_layout_that_reads_implausible_channels_is_refused_naming_the_other(tmp_path):
    x = pixels((2, 8, 8, 3))  # three 8x8 channels, channels last
    path = save(tmp_path / "hwc.npz", x_train=x, y_train=[0, 1], x_test=x[:1], y_test=[1])
    with pytest.raises(ValueError) as error:
        load_dataset("npz", options={"path": path, "layout": "nchw"})  # would be 8 channels of 8x3 images
    assert str(error.value) == (
        f"npz: {path}: layout nchw reads x_train (2, 8, 8, 3) as 8 channel(s) of 8x3 images; nhwc reads it as 3 "
        "channel(s) of 8x8, as images usually are: set base.dataset_options.layout: nhwc (or leave it unset: read "
        "off the shape)"
    )
    assert load_dataset("npz", options={"path": path, "layout": "nhwc"}).x_train.shape == (2, 3, 8, 8)
    how = "return layout: 'nchw' or 'nhwc' in the loader's mapping"
    with pytest.raises(ValueError, match=r"layout nhwc reads x_train \(2, 3, 8, 8\) as 8 channel\(s\) of 3x8 images; "
                       r"nchw reads .* return layout: 'nchw' in the loader's mapping"):  # fmt: skip
        image_layout("dataset 'mine'", (2, 3, 8, 8), "nhwc", how)
    # many channels where no other axis could hold them: multispectral data, declared, is read as declared
    assert image_layout("x", (2, 13, 64, 64), "nchw", how) == "nchw" and image_layout("x", (2, 8, 8, 8), "nchw", how)


# ---- npz: the classes -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("y_train", "y_test", "message"),
    [
        ([0, 1, 0, 1], [2, 0], "classes without a training sample: 2 (only in y_test); every class 0..K-1 (K = 3)"),
        ([0, 2, 0, 2], [0, 2], "classes without a training sample: 1 (in neither split); every class 0..K-1 (K = 3)"),
        ([0, 1, 1, 0], [3, 1], "classes without a training sample: 3 (only in y_test); 2 (in neither split)"),
        ([1, 1, 1, 1], [1, 1], "every label is 1: one class, nothing to learn"),
    ],
)
def test_npz_labels_a_classifier_cannot_learn_are_refused(tmp_path, y_train, y_test, message):
    path = save(tmp_path / "y.npz", x_train=pixels((4, 5, 5)), y_train=y_train, x_test=pixels((2, 5, 5)), y_test=y_test)
    with pytest.raises(ValueError) as error:
        load_dataset("npz", options={"path": path})
    assert str(error.value).startswith(f"npz: {path}: {message}"), str(error.value)


GOOD = {"x_train": np.zeros((3, 4, 4)), "y_train": [0, 1, 2], "x_test": np.zeros((2, 4, 4)), "y_test": [0, 1]}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"x_train": np.zeros(3)}, "x_train must be (N, C, H, W) or (N, H, W), got shape (3,)"),
        ({"y_train": [0, 1]}, "y_train must be (3,), one label per image, got (2,)"),
        ({"y_train": [0.5, 1, 2]}, "y_train must hold integer labels 0..K-1, got dtype float64"),
        ({"y_test": [-1, 1]}, "y_test has labels -1..1; labels must be 0..K-1 integers"),
        (
            {"x_train": np.full((3, 4, 4), 256), "x_test": np.zeros((2, 4, 4), np.uint8)},
            "x_train holds integers 256..256; integer images are read as 8-bit pixels 0..255",
        ),
        ({"x_test": np.zeros((2, 4, 4), np.uint8)}, "x_test holds integer pixels (uint8) but x_train float64"),
        ({"x_train": np.zeros((3, 4, 4), bool)}, "x_train must hold numbers, got dtype bool"),
        ({"x_test": np.zeros((2, 5, 5))}, "x_train images are (1, 4, 4) but x_test's (1, 5, 5)"),
        ({"x_test": np.full((2, 4, 4), np.nan)}, "x_test holds NaN or infinite values"),
    ],
)
def test_npz_arrays_that_break_the_contract_are_refused_naming_the_file(tmp_path, change, message):
    path = save(tmp_path / "bad.npz", **{**GOOD, **change})
    with pytest.raises(ValueError) as error:
        load_dataset("npz", options={"path": path})
    assert str(error.value).startswith(f"npz: {path}: ") and message in str(error.value)


def test_npz_missing_file_or_arrays(tmp_path):
    with pytest.raises(FileNotFoundError, match="npz: no such file: .*nowhere.npz"):
        load_dataset("npz", options={"path": str(tmp_path / "nowhere.npz")})
    path = save(tmp_path / "partial.npz", x_train=np.zeros((1, 2, 2)), y_train=[0])
    with pytest.raises(ValueError, match="lacks x_test, y_test"):
        load_dataset("npz", options={"path": path})


# ---- dataset_options in a search space ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base", "message"),
    [
        ({"dataset": "npz"}, "base.dataset_options.path: dataset 'npz' needs it (a .npz file holding x_train"),
        (
            {"dataset": "npz", "dataset_options": {"path": "a.npz", "pth": 1}},
            "base.dataset_options.pth: not a setting of dataset 'npz'; its settings: path",
        ),
        ({"dataset": "digits", "dataset_options": {"path": "a"}}, "dataset 'digits' takes no options (got path)"),
        (
            {"dataset": "torchvision", "dataset_options": {"name": "Mnist"}},
            "unknown torchvision dataset 'Mnist'; supported: MNIST, FashionMNIST",
        ),
        (
            {"dataset": "torchvision", "dataset_options": {"name": "EMNIST"}},
            "base.dataset_options.split: EMNIST needs a split: byclass, bymerge, balanced, letters, digits, mnist",
        ),
        (
            {"dataset": "torchvision", "dataset_options": {"name": "MNIST", "split": "letters"}},
            "base.dataset_options.split: only EMNIST takes a split, not MNIST",
        ),
        (
            {"dataset": "image_folder", "dataset_options": {"image_size": 0}},
            "base.dataset_options.image_size: must be positive",
        ),
    ],
)
def test_dataset_options_are_checked_against_the_dataset(base, message):
    with pytest.raises(ConfigError) as error:
        parse_space(tiny_space("files", **base))
    assert message in str(error.value), str(error.value)


def test_relative_paths_are_made_absolute_where_the_space_is_checked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = ExperimentConfig(dataset="npz", dataset_options={"path": "data/a.npz"}, root="imgs")
    assert config.dataset_options == {"path": str(tmp_path / "data" / "a.npz")}  # trials run in another folder
    assert config.root == str(tmp_path / "imgs")


def test_a_bad_npz_exits_2_before_ray_naming_the_field(tmp_path):
    path = save(tmp_path / "bad.npz", **{**GOOD, "y_test": [0, -1]})
    space = tiny_space("badnpz", dataset="npz", dataset_options={"path": path})
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(space))
    run = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "tune.py"), "--space", "space.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2, run.stderr
    assert run.stderr.startswith(f"error: base.dataset_options: npz: {path}: y_test has labels -1..0; labels must"), (
        run.stderr
    )
    assert "Ray cluster" not in run.stdout and not (tmp_path / "mlflow.db").exists()


# ---- a plugin loader's result ---------------------------------------------------------------------------------


def test_a_loaders_mapping_is_checked_and_converted():
    ds = to_array_dataset("mine", {**GOOD, "class_names": ["a", "b", "c"]})
    assert ds.name == "mine" and ds.x_train.shape == (3, 1, 4, 4) and ds.class_names == ("a", "b", "c")
    with pytest.raises(ValueError, match="dataset 'mine': its loader returned a list"):
        to_array_dataset("mine", [1, 2])
    with pytest.raises(ValueError, match="dataset 'mine': its loader's mapping lacks y_test"):
        to_array_dataset("mine", {k: v for k, v in GOOD.items() if k != "y_test"})
    with pytest.raises(ValueError, match="dataset 'mine': 2 class_names for 3 classes"):
        to_array_dataset("mine", {**GOOD, "class_names": ["a", "b"]})
    with pytest.raises(ValueError, match=r"dataset 'mine': classes without a training sample: 3, 4 \(in neither"):
        to_array_dataset("mine", {**GOOD, "num_classes": 5})  # a head of 5 outputs, two never trained
    with pytest.raises(
        ValueError, match=r"dataset 'mine': y_train has labels 0..2; with num_classes 2 they must be 0..1"
    ):
        to_array_dataset("mine", {**GOOD, "num_classes": 2})
    with pytest.raises(ValueError, match="dataset 'mine': num_classes must be a positive integer, got 2.5"):
        to_array_dataset("mine", {**GOOD, "num_classes": 2.5})
    x = np.full((3, 4, 4), 300, dtype=np.int64)  # a loader's integer images are used as given, not as pixels
    assert to_array_dataset("mine", {**GOOD, "x_train": x}).x_train.max() == 300


def test_a_loaders_arrays_go_through_the_layout_and_class_checks():
    x = pixels((3, 6, 6, 3)).astype(np.float32)  # channels last: detected, as for npz
    ds = to_array_dataset("mine", {**GOOD, "x_train": x, "x_test": x[:2]})
    assert ds.x_train.shape == (3, 3, 6, 6) and ds.layout == "nhwc" and np.array_equal(ds.x_train[1, 2], x[1, ..., 2])
    cube = pixels((3, 3, 3, 3)).astype(np.float32)
    with pytest.raises(ValueError, match=r"^dataset 'mine': x_train \(3, 3, 3, 3\) is ambiguous: .*; return layout"):
        to_array_dataset("mine", {**GOOD, "x_train": cube, "x_test": cube[:2]})
    declared = to_array_dataset("mine", {**GOOD, "x_train": cube, "x_test": cube[:2], "layout": "nhwc"})
    assert np.array_equal(declared.x_train, cube.transpose(0, 3, 1, 2))
    with pytest.raises(ValueError, match="dataset 'mine': its loader's layout must be 'nchw' or 'nhwc', got 'chw'"):
        to_array_dataset("mine", {**GOOD, "layout": "chw"})
    with pytest.raises(ValueError, match=r"dataset 'mine': classes without a training sample: 2 \(only in y_test\)"):
        to_array_dataset("mine", {**GOOD, "y_train": [0, 1, 1], "y_test": [2, 0]})


def test_a_plugins_own_array_dataset_has_its_labels_checked(monkeypatch):
    x = np.zeros((3, 1, 4, 4), np.float32)
    one_class = ArrayDataset("plug", x, np.zeros(3, np.int64), x[:1], np.zeros(1, np.int64), num_classes=1)
    monkeypatch.setitem(DATASETS._entries, "plug_one", lambda root=None: one_class)
    monkeypatch.setitem(DATASETS._user, "plug_one", "a plugin")  # as register_dataset records it
    with pytest.raises(ValueError, match="^dataset 'plug_one': every label is 0: one class"):
        load_dataset("plug_one")


def test_a_loader_taking_options_without_a_model_gets_them_as_written(monkeypatch):
    seen = {}

    def loader(root=None, options=None):
        seen.update(options)
        return GOOD

    monkeypatch.setitem(DATASETS._entries, "opts_as_written", loader)  # a plugin's, without registering it for good
    assert check_options("opts_as_written", {"noise": 0.1}) == {"noise": 0.1}
    assert load_dataset("opts_as_written", options={"noise": 0.1}).x_train.shape == (3, 1, 4, 4)
    assert seen == {"noise": 0.1}
    with pytest.raises(ValueError, match="^dataset_options: synthetic data takes its settings from the `synthetic`"):
        check_options("synthetic", {"noise": 0.1})


# ---- image_folder ---------------------------------------------------------------------------------------------


def png(path, pixels, mode):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.asarray(pixels, dtype=np.uint8), mode=mode).save(path)


def test_image_folder_reads_grayscale_as_one_channel_with_labels_by_sorted_class(tmp_path):
    png(tmp_path / "train" / "b_cat" / "1.png", [[0, 255], [255, 255]], "L")
    png(tmp_path / "train" / "a_dog" / "1.png", [[255, 255], [255, 255]], "L")
    png(tmp_path / "test" / "b_cat" / "x.png", [[0, 0], [0, 0]], "L")
    ds = load_dataset("image_folder", root=str(tmp_path), options={})
    assert ds.class_names == ("a_dog", "b_cat") and ds.y_train.tolist() == [0, 1] and ds.y_test.tolist() == [1]
    assert ds.x_train.shape == (2, 1, 2, 2)
    # train pixels /255: seven 1s and one 0 -> mean 7/8, population std sqrt(7)/8
    np.testing.assert_allclose(ds.x_test.ravel(), [(0 - 7 / 8) / (np.sqrt(7) / 8)] * 4, rtol=1e-6)


def test_image_folder_reads_rgb_per_channel_standardised(tmp_path):
    png(tmp_path / "train" / "a" / "1.jpg.png", [[[255, 0, 10], [255, 0, 30]]], "RGB")  # one 1x2 image
    png(tmp_path / "train" / "b" / "2.png", [[[0, 0, 10], [0, 0, 30]]], "RGB")
    png(tmp_path / "test" / "b" / "3.png", [[[255, 51, 20], [0, 0, 20]]], "RGB")
    (tmp_path / "train" / "a" / "notes.txt").write_text("not an image")  # skipped: not an image suffix
    ds = load_dataset("image_folder", root=str(tmp_path), options={})
    assert ds.x_train.shape == (2, 3, 1, 2) and ds.y_train.tolist() == [0, 1] and ds.y_test.tolist() == [1]
    # train: red 1, 1, 0, 0 -> mean 0.5, std 0.5; green all 0 -> only centred; blue 10, 30 (/255) -> mean 20, std 10
    np.testing.assert_allclose(ds.x_train[:, 0].ravel(), [1, 1, -1, -1], atol=1e-6)
    np.testing.assert_allclose(ds.x_test[0, 0].ravel(), [1, -1], atol=1e-6)
    np.testing.assert_allclose(ds.x_test[0, 1].ravel(), [0.2, 0], atol=1e-6)
    np.testing.assert_allclose(ds.x_train[:, 2].ravel(), [-1, 1, -1, 1], atol=1e-5)
    np.testing.assert_allclose(ds.x_test[0, 2].ravel(), [0, 0], atol=1e-5)


def test_image_folder_resizes_and_reads_mixed_modes_as_rgb(tmp_path):
    png(tmp_path / "train" / "a" / "1.png", np.zeros((4, 6, 3)), "RGB")
    png(tmp_path / "train" / "b" / "1.png", np.full((8, 8), 200), "L")
    png(tmp_path / "test" / "a" / "1.png", np.zeros((3, 3, 3)), "RGB")
    ds = load_dataset("image_folder", root=str(tmp_path), options={"image_size": [5, 7]})
    assert ds.x_train.shape == (2, 3, 5, 7) and ds.x_test.shape == (1, 3, 5, 7)
    with pytest.raises(ValueError, match="differ in size .*set dataset_options.image_size"):
        load_dataset("image_folder", root=str(tmp_path), options={})


def test_image_folder_refusals_name_the_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match=f"image_folder: {tmp_path / 'train'} not found"):
        load_dataset("image_folder", root=str(tmp_path), options={})
    png(tmp_path / "train" / "a" / "1.png", np.zeros((2, 2)), "L")
    png(tmp_path / "test" / "zebra" / "1.png", np.zeros((2, 2)), "L")
    with pytest.raises(ValueError, match="test classes zebra under .* have no train images"):
        load_dataset("image_folder", root=str(tmp_path), options={})


def test_image_folder_with_one_class_is_refused(tmp_path):
    for split in ("train", "test"):
        png(tmp_path / split / "cat" / "1.png", np.zeros((2, 2)), "L")
    png(tmp_path / "train" / "cat" / "2.png", np.zeros((2, 2)), "L")
    (tmp_path / "train" / "dog").mkdir()  # a class folder without images is no class
    with pytest.raises(ValueError) as error:
        load_dataset("image_folder", root=str(tmp_path), options={})
    assert str(error.value) == (
        f"image_folder: {tmp_path / 'train'} holds one class folder (cat); a classifier needs at least 2: one "
        "train/<class>/ folder per class"
    )


# ---- torchvision ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["MNIST", "FashionMNIST", "KMNIST"])
def test_torchvision_reads_its_own_files_without_downloading(tmp_path, name):
    raw = tmp_path / name / "raw"
    train = np.zeros((10, 28, 28), dtype=np.uint8)
    train[1] = 255
    labels = [5, 0, 9, 1, 2, 3, 4, 6, 7, 8]  # every class has a training sample
    write_idx(raw, "train", train, np.array(labels, dtype=np.uint8))
    write_idx(raw, "t10k", np.zeros((2, 28, 28), dtype=np.uint8), np.array([1, 2], dtype=np.uint8))
    ds = load_dataset("torchvision", root=str(tmp_path), options={"name": name})
    assert ds.x_train.shape == (10, 1, 28, 28) and ds.num_classes == 10 and len(ds.class_names) == 10
    assert ds.y_train.tolist() == labels and ds.y_test.tolist() == [1, 2]
    # one bright image of ten: mean 0.1, std 0.3 per pixel position pooled
    np.testing.assert_allclose(ds.x_train[1, 0, 0, 0], (1 - 0.1) / 0.3, rtol=1e-5)


def test_torchvision_labels_are_checked_as_npz_labels_are(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    write_idx(raw, "train", np.zeros((3, 28, 28), dtype=np.uint8), np.array([5, 0, 9], dtype=np.uint8))
    write_idx(raw, "t10k", np.zeros((2, 28, 28), dtype=np.uint8), np.array([1, 2], dtype=np.uint8))
    with pytest.raises(ValueError) as error:
        load_dataset("torchvision", root=str(tmp_path), options={"name": "MNIST"})
    assert str(error.value).startswith(
        f"torchvision MNIST: {tmp_path}: classes without a training sample: 1, 2 (only in y_test); 3, 4, 6, 7, 8 (in "
        "neither split); every class 0..K-1 (K = 10) needs one"
    ), str(error.value)
    # a copy holding the first classes only gets a head of its own size, named by torchvision's first names
    write_idx(raw, "train", np.zeros((3, 28, 28), dtype=np.uint8), np.array([0, 1, 2], dtype=np.uint8))
    ds = load_dataset("torchvision", root=str(tmp_path), options={"name": "MNIST"})
    assert ds.num_classes == 3 and ds.class_names == ("0 - zero", "1 - one", "2 - two")


def test_torchvision_without_its_files_names_the_root_and_the_files(tmp_path):
    with pytest.raises(FileNotFoundError) as error:
        load_dataset("torchvision", root=str(tmp_path), options={"name": "KMNIST"})
    assert f"torchvision KMNIST: not found or corrupted under {tmp_path}" in str(error.value)
    assert "KMNIST/raw/" in str(error.value) and "set dataset_options.download: true" in str(error.value)


def test_torchvision_emnist_letters_are_shifted_to_0_based(tmp_path):
    raw = tmp_path / "EMNIST" / "raw"
    letters = np.r_[1, 26, 2:26].astype(np.uint8)  # every letter once
    write_idx(raw, "emnist-letters-train", np.zeros((26, 28, 28), dtype=np.uint8), letters)
    write_idx(raw, "emnist-letters-test", np.zeros((1, 28, 28), dtype=np.uint8), np.array([3], dtype=np.uint8))
    ds = load_dataset("torchvision", root=str(tmp_path), options={"name": "EMNIST", "split": "letters"})
    assert ds.y_train.tolist()[:3] == [0, 25, 1] and ds.y_test.tolist() == [2] and ds.num_classes == 26
    assert ds.class_names[0] == "a" and ds.name == "emnist_letters"


def no_checksums(monkeypatch):
    """torchvision compares CIFAR's and SVHN's files with the official md5s: tiny files need that check off."""
    import torchvision

    monkeypatch.setattr(torchvision.datasets.CIFAR10, "_check_integrity", lambda self: True)
    monkeypatch.setattr(torchvision.datasets.cifar, "check_integrity", lambda path, md5=None: Path(path).is_file())
    monkeypatch.setattr(torchvision.datasets.SVHN, "_check_integrity", lambda self: True)


def by_hand(x_train, x_test):
    """uint8 (N, C, H, W) -> /255, then per channel with the train split's mean and population std (a constant
    channel only centred)."""
    train, test = x_train / 255.0, x_test / 255.0
    mean, std = train.mean(axis=(0, 2, 3), keepdims=True), train.std(axis=(0, 2, 3), keepdims=True)
    std[std == 0] = 1
    return (train - mean) / std, (test - mean) / std


@pytest.mark.parametrize("name", ["CIFAR10", "CIFAR100"])
def test_torchvision_cifar_keeps_channels_and_pixel_positions(tmp_path, monkeypatch, name):
    no_checksums(monkeypatch)
    if name == "CIFAR10":
        folder = tmp_path / "cifar-10-batches-py"
        batches = {f"data_batch_{i}": 2 for i in range(1, 6)} | {"test_batch": 3}
        written = write_cifar(folder, batches, "labels", 10, every_class=True)
        dump(folder / "batches.meta", {"label_names": [f"c{i}" for i in range(10)]})
        train = [written[f"data_batch_{i}"] for i in range(1, 6)]
        test = written["test_batch"]
    else:
        folder = tmp_path / "cifar-100-python"
        written = write_cifar(folder, {"train": 100, "test": 3}, "fine_labels", 100, every_class=True)
        dump(folder / "meta", {"fine_label_names": [f"f{i}" for i in range(100)]})
        train, test = [written["train"]], written["test"]
    x_train, y_train = np.concatenate([x for x, _ in train]), sum((y for _, y in train), [])
    ds = load_dataset("torchvision", root=str(tmp_path), options={"name": name})
    assert ds.x_train.shape == (len(y_train), 3, 32, 32) and ds.y_train.tolist() == y_train
    assert ds.y_test.tolist() == test[1] and ds.num_classes == len(ds.class_names) == int(name[5:])
    want_train, want_test = by_hand(x_train, test[0])
    np.testing.assert_allclose(ds.x_train, want_train, atol=1e-4)
    np.testing.assert_allclose(ds.x_test, want_test, atol=1e-4)


def test_torchvision_cifar_files_that_fail_torchvisions_checksum_are_reported(tmp_path):
    write_cifar(tmp_path / "cifar-10-batches-py", {f"data_batch_{i}": 1 for i in range(1, 6)}, "labels", 10)
    with pytest.raises(FileNotFoundError, match=f"torchvision CIFAR10: not found or corrupted under {tmp_path} "):
        load_dataset("torchvision", root=str(tmp_path), options={"name": "CIFAR10"})


def test_torchvision_svhn_label_10_is_digit_0_and_images_stay_upright(tmp_path, monkeypatch):
    no_checksums(monkeypatch)
    x_train = np.zeros((4, 3, 32, 32), dtype=np.uint8)
    x_train[0, 0, 0, 1] = 255  # red at row 0, column 1 of the first image: checks the (H, W, C, N) transpose
    x_test = np.zeros((1, 3, 32, 32), dtype=np.uint8)
    write_svhn(tmp_path, "train", x_train, np.array([10, 3, 1, 2], dtype=np.uint8))
    write_svhn(tmp_path, "test", x_test, np.array([10], dtype=np.uint8))
    ds = load_dataset("torchvision", root=str(tmp_path), options={"name": "SVHN"})
    assert ds.y_train.tolist() == [0, 3, 1, 2] and ds.y_test.tolist() == [0] and ds.num_classes == 4  # largest + 1
    want_train, _ = by_hand(x_train, x_test)
    np.testing.assert_allclose(ds.x_train, want_train, atol=1e-4)
    assert ds.x_train[0, 0, 0, 1] == ds.x_train.max() > 0 and (ds.x_train[:, 1:] == 0).all()  # green, blue constant


def test_torchvision_usps(tmp_path):
    images = np.zeros((10, 16, 16), dtype=np.uint8)
    images[5:] = 255
    write_usps(tmp_path / "usps.bz2", images, list(range(1, 11)))  # labels 1..10: every class once
    write_usps(tmp_path / "usps.t.bz2", images[:1], [2])
    ds = load_dataset("torchvision", root=str(tmp_path), options={"name": "USPS"})
    assert ds.x_train.shape == (10, 1, 16, 16) and ds.y_train.tolist() == list(range(10)) and ds.y_test.tolist() == [1]
    np.testing.assert_allclose(ds.x_train[:, 0, 0, 0], [-1] * 5 + [1] * 5, atol=1e-6)  # mean 0.5, std 0.5
    with pytest.raises(FileNotFoundError, match=f"torchvision USPS: not found or corrupted under {tmp_path / 'x'}"):
        load_dataset("torchvision", root=str(tmp_path / "x"), options={"name": "USPS"})


# ---- the bad data the bad-inputs table reads (tests/support/bad_data) -----------------------------------------


def test_the_committed_bad_data_is_what_its_writer_makes_and_each_file_is_refused(tmp_path):
    fresh = write_bad_data(tmp_path)
    for name in ("ambiguous.npz", "test_only_class.npz", "one_class.npz"):
        with np.load(BAD_DATA / name) as kept, np.load(fresh[name]) as made:
            assert sorted(kept.files) == sorted(made.files)
            assert all(np.array_equal(kept[k], made[k]) and kept[k].dtype == made[k].dtype for k in kept.files)
    for png_file in sorted(fresh["one_class_folder"].rglob("*.png")):
        assert (BAD_DATA / png_file.relative_to(tmp_path)).read_bytes() == png_file.read_bytes()
    assert sorted(p.relative_to(BAD_DATA) for p in BAD_DATA.rglob("*") if p.is_file()) == sorted(
        p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file()
    )
    refusals = {
        "ambiguous.npz": "is ambiguous",
        "test_only_class.npz": "classes without a training sample: 2 (only in y_test)",
        "one_class.npz": "every label is 0: one class",
    }
    for name, message in refusals.items():
        with pytest.raises(ValueError, match=re.escape(message)):
            load_dataset("npz", options={"path": str(BAD_DATA / name)})
    with pytest.raises(ValueError, match=re.escape("holds one class folder (cat)")):
        load_dataset("image_folder", root=str(BAD_DATA / "one_class_folder"), options={})
