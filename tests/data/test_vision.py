"""raytune_fl.data.vision: tiny datasets written in the real on-disk formats, loaded through load_dataset."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import raytune_fl.data.vision  # noqa: F401  (registers the names)
from raytune_fl.data.datasets import DATASETS, ArrayDataset, load_dataset
from tests.support.data_files import dump, write_cifar

RNG = np.random.default_rng(0)


def unnormalise(ds: ArrayDataset, x: np.ndarray, train_u8: np.ndarray) -> np.ndarray:
    """Map loaded images back to [0, 1] with the per-channel train statistics recomputed from the raw bytes."""
    raw = train_u8.astype(np.float64) / 255.0
    mean, std = raw.mean(axis=(0, 2, 3)), raw.std(axis=(0, 2, 3))
    return x * std[None, :, None, None] + mean[None, :, None, None]


def check_common(ds: ArrayDataset, train_u8: np.ndarray, test_u8: np.ndarray, y_train, y_test) -> None:
    for x, u8 in ((ds.x_train, train_u8), (ds.x_test, test_u8)):
        assert x.dtype == np.float32 and x.flags.c_contiguous and x.shape == u8.shape
        np.testing.assert_allclose(unnormalise(ds, x, train_u8), u8 / 255.0, atol=1e-5)
    assert ds.y_train.dtype == np.int64 and ds.y_test.dtype == np.int64
    np.testing.assert_array_equal(ds.y_train, y_train)
    np.testing.assert_array_equal(ds.y_test, y_test)
    np.testing.assert_allclose(ds.x_train.mean(axis=(0, 2, 3)), 0.0, atol=1e-4)
    np.testing.assert_allclose(ds.x_train.std(axis=(0, 2, 3)), 1.0, atol=1e-4)


# --- writers for the real formats ---------------------------------------------------------------------------


@pytest.fixture
def cifar10(tmp_path: Path) -> tuple[Path, dict]:
    folder = tmp_path / "cifar-10-batches-py"
    batches = {f"data_batch_{i}": 4 for i in range(1, 6)} | {"test_batch": 3}
    written = write_cifar(folder, batches, "labels", 10)
    x, _ = written["data_batch_2"]
    x[1, 0, 2, 5] = 200  # image 5 of the train split, red, row 2, column 5
    flat = pickle.loads((folder / "data_batch_2").read_bytes(), encoding="latin1")
    flat["data"][1, 0 * 1024 + 2 * 32 + 5] = 200
    dump(folder / "data_batch_2", flat)
    dump(folder / "batches.meta", {"label_names": [f"c{i}" for i in range(10)], "num_cases_per_batch": 4})
    return tmp_path, written


@pytest.fixture
def cifar100(tmp_path: Path) -> tuple[Path, dict]:
    folder = tmp_path / "cifar-100-python"
    written = write_cifar(folder, {"train": 6, "test": 3}, "fine_labels", 100)
    dump(folder / "meta", {"fine_label_names": [f"f{i}" for i in range(100)], "coarse_label_names": ["x"] * 20})
    return tmp_path, written


@pytest.fixture
def stl10(tmp_path: Path) -> tuple[Path, dict]:
    """STL-10 binaries; image 0 of train is a vertical gradient (value = row), so its orientation is visible."""
    folder = tmp_path / "stl10_binary"
    folder.mkdir()
    written = {}
    for split, n in (("train", 3), ("test", 2)):
        x = RNG.integers(0, 256, (n, 3, 96, 96), dtype=np.uint8)
        if split == "train":
            x[0] = np.arange(96, dtype=np.uint8)[None, :, None]
        y = RNG.integers(1, 11, n, dtype=np.uint8)
        np.ascontiguousarray(x.transpose(0, 1, 3, 2)).tofile(folder / f"{split}_X.bin")  # column-major on disk
        y.tofile(folder / f"{split}_y.bin")
        written[split] = (x, y.astype(np.int64) - 1)
    (folder / "class_names.txt").write_text("\n".join(f"s{i}" for i in range(10)) + "\n")
    return tmp_path, written


WNIDS = ["n01443537", "n01629819"]


@pytest.fixture
def tiny(tmp_path: Path) -> tuple[Path, list[Path], list[int], list[Path], list[int]]:
    """Tiny-ImageNet tree: 2 wnids x 2 train JPEGs (one greyscale), 3 val JPEGs with val_annotations.txt."""
    base = tmp_path / "tiny-imagenet-200"
    (base / "val" / "images").mkdir(parents=True)
    (base / "wnids.txt").write_text("\n".join(WNIDS) + "\n")

    def jpeg(path: Path, colour: tuple[int, int, int], grey: bool = False) -> Path:
        img = Image.new("RGB", (64, 64), colour)
        img.paste((255, 255, 255), (0, 0, 16, 8))  # a non-square patch: 16 columns wide, 8 rows high
        (img.convert("L") if grey else img).save(path, quality=100, subsampling=0)  # near-lossless
        return path

    train, y_train = [], []
    for label, wnid in enumerate(WNIDS):
        (base / "train" / wnid / "images").mkdir(parents=True)
        for k in range(2):
            train.append(jpeg(base / "train" / wnid / "images" / f"{wnid}_{k}.JPEG", (40 + 100 * label, 80, 20 * k), k))
            y_train.append(label)
    test, y_test, lines = [], [], []
    for k, label in enumerate([1, 0, 1]):
        test.append(jpeg(base / "val" / "images" / f"val_{k}.JPEG", (30, 60 * label, 90)))
        y_test.append(label)
        lines.append(f"val_{k}.JPEG\t{WNIDS[label]}\t0\t0\t63\t63")
    (base / "val" / "val_annotations.txt").write_text("\n".join(lines) + "\n")
    return tmp_path, train, y_train, test, y_test


def decoded(paths: list[Path]) -> np.ndarray:
    return np.stack([np.asarray(Image.open(p).convert("RGB")).transpose(2, 0, 1) for p in paths])


# --- loading -------------------------------------------------------------------------------------------------


def test_names_are_registered():
    assert {"cifar10", "cifar100", "stl10", "tinyimagenet"} <= set(DATASETS.names())


def test_cifar10(cifar10):
    root, written = cifar10
    ds = load_dataset("cifar10", root=str(root))
    train_u8 = np.concatenate([written[f"data_batch_{i}"][0] for i in range(1, 6)])
    y_train = sum((written[f"data_batch_{i}"][1] for i in range(1, 6)), [])
    test_u8, y_test = written["test_batch"]
    assert ds.x_train.shape == (20, 3, 32, 32) and ds.x_test.shape == (3, 3, 32, 32)
    check_common(ds, train_u8, test_u8, y_train, y_test)
    assert unnormalise(ds, ds.x_train, train_u8)[5, 0, 2, 5] == pytest.approx(200 / 255, abs=1e-5)
    assert ds.num_classes == 10 and ds.class_names == tuple(f"c{i}" for i in range(10))
    assert ds.name == "cifar10" and ds.in_channels == 3 and ds.image_size == (32, 32)


def test_cifar10_cached_per_resolved_root(cifar10):
    root, _ = cifar10
    first = load_dataset("cifar10", root=str(root))
    assert load_dataset("cifar10", root=f"{root}/./") is first
    assert load_dataset("cifar10", root=str(root / "cifar-10-batches-py")) is first  # the dataset folder itself


def test_cifar100(cifar100):
    root, written = cifar100
    ds = load_dataset("cifar100", root=str(root))
    assert ds.x_train.shape == (6, 3, 32, 32) and ds.x_test.shape == (3, 3, 32, 32)
    check_common(ds, written["train"][0], written["test"][0], written["train"][1], written["test"][1])
    assert ds.num_classes == 100 and ds.class_names[:2] == ("f0", "f1") and len(ds.class_names) == 100


def test_stl10(stl10):
    root, written = stl10
    ds = load_dataset("stl10", root=str(root))
    assert ds.x_train.shape == (3, 3, 96, 96) and ds.x_test.shape == (2, 3, 96, 96)
    check_common(ds, written["train"][0], written["test"][0], written["train"][1], written["test"][1])
    gradient = unnormalise(ds, ds.x_train, written["train"][0])[0, 1]
    np.testing.assert_allclose(gradient[:, 7], np.arange(96) / 255.0, atol=1e-5)  # varies down a column
    np.testing.assert_allclose(gradient[10, :], 10 / 255.0, atol=1e-5)  # constant along a row
    assert ds.num_classes == 10 and ds.class_names == tuple(f"s{i}" for i in range(10))


@pytest.mark.parametrize("at_folder", [False, True])
def test_tinyimagenet(tiny, at_folder):
    root, train, y_train, test, y_test = tiny
    ds = load_dataset("tinyimagenet", root=str(root / "tiny-imagenet-200" if at_folder else root))
    assert ds.x_train.shape == (4, 3, 64, 64) and ds.x_test.shape == (3, 3, 64, 64)
    train_u8, test_u8 = decoded(train), decoded(test)
    check_common(ds, train_u8, test_u8, y_train, y_test)
    assert ds.class_names == tuple(WNIDS) and ds.num_classes == 2
    pixels = unnormalise(ds, ds.x_train, train_u8)[0]  # RGB (40, 80, 0), white in rows 0..7 x columns 0..15
    np.testing.assert_allclose(pixels[:, 4, 12], 1.0, atol=4 / 255)
    np.testing.assert_allclose(pixels[:, 12, 4], [40 / 255, 80 / 255, 0.0], atol=4 / 255)
    grey = unnormalise(ds, ds.x_train, train_u8)[1, :, 32, 32]  # a greyscale JPEG comes back as 3 equal channels
    np.testing.assert_allclose(grey, grey[0], atol=1e-5)


# --- errors --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["cifar10", "cifar100", "stl10", "tinyimagenet"])
def test_root_none_or_missing(name, tmp_path):
    with pytest.raises(FileNotFoundError, match="no root was given"):
        load_dataset(name)
    with pytest.raises(FileNotFoundError, match="not found under .*nope"):
        load_dataset(name, root=str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match="expected <root>/"):
        load_dataset(name, root=str(tmp_path))  # an empty directory


def test_messages_name_the_expected_layout(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"cifar-10-batches-py/ holding data_batch_1\.\.5, test_batch"):
        load_dataset("cifar10", root=str(tmp_path))
    (tmp_path / "stl10_binary").mkdir()  # the folder exists but holds nothing
    with pytest.raises(FileNotFoundError, match=r"train_X\.bin not found; expected .* to hold train_X\.bin"):
        load_dataset("stl10", root=str(tmp_path))


def test_cifar_truncated_batch(cifar10):
    root, _ = cifar10
    path = root / "cifar-10-batches-py" / "data_batch_3"
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(ValueError, match="data_batch_3 is malformed"):
        load_dataset("cifar10", root=str(root))


def test_cifar_missing_meta(cifar100):
    root, _ = cifar100
    (root / "cifar-100-python" / "meta").unlink()
    with pytest.raises(FileNotFoundError, match="meta not found"):
        load_dataset("cifar100", root=str(root))


def test_stl_truncated_images(stl10):
    root, _ = stl10
    path = root / "stl10_binary" / "test_X.bin"
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(ValueError, match="test_X.bin is malformed.*truncated"):
        load_dataset("stl10", root=str(root))


def test_stl_label_count_and_range(stl10):
    root, _ = stl10
    labels = root / "stl10_binary" / "train_y.bin"
    labels.write_bytes(bytes([1, 2]))  # 3 images, 2 labels
    with pytest.raises(ValueError, match="3 images but 2 labels"):
        load_dataset("stl10", root=str(root))
    labels.write_bytes(bytes([0, 1, 2]))  # labels are 1-based on disk: 0 is invalid
    with pytest.raises(ValueError, match="labels outside 0..9"):
        load_dataset("stl10", root=str(root))


def test_tinyimagenet_truncated_jpeg(tiny):
    root, train, *_ = tiny
    train[2].write_bytes(train[2].read_bytes()[:200])
    with pytest.raises(ValueError, match=f"{train[2].name} is malformed"):
        load_dataset("tinyimagenet", root=str(root))


def test_tinyimagenet_unknown_val_wnid(tiny):
    root, *_ = tiny
    (root / "tiny-imagenet-200" / "val" / "val_annotations.txt").write_text("val_0.JPEG\tn99999999\t0\t0\t1\t1\n")
    with pytest.raises(ValueError, match="lacks a known wnid"):
        load_dataset("tinyimagenet", root=str(root))
