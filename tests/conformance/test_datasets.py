"""The datasets registry's conformance: every registered dataset loads to the array contract (embedded ones as
they are, file-backed ones from a small root in the real on-disk format) or names the root it looked in."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import raytune_fl.models  # noqa: F401  (registers the models)
from raytune_fl.data import DATASETS, ArrayDataset, load_dataset
from tests.support.data_files import (
    PACS_LIKE,
    RNG,
    SIZES,
    dump,
    make_domain_tree,
    make_ham,
    save_image,
    write_cifar,
    write_femnist_parquet,
    write_idx,
    write_leaf,
)

# ---- datasets: factory(root) -> ArrayDataset (N, C, H, W) float32 images, int64 labels -------------------------

EMBEDDED = {"mnist5k", "digits", "mnist5k_rotated", "synthetic"}  # in installed packages, or generated: no root


def _cifar(tmp: Path, name: str) -> str:
    if name == "cifar10":
        folder = tmp / "cifar-10-batches-py"
        write_cifar(folder, {f"data_batch_{i}": 4 for i in range(1, 6)} | {"test_batch": 4}, "labels", 10)
        dump(folder / "batches.meta", {"label_names": [f"c{i}" for i in range(10)], "num_cases_per_batch": 4})
    else:
        folder = tmp / "cifar-100-python"
        write_cifar(folder, {"train": 8, "test": 4}, "fine_labels", 100)
        dump(folder / "meta", {"fine_label_names": [f"f{i}" for i in range(100)], "coarse_label_names": ["x"] * 20})
    return str(tmp)


ROOTS: dict[str, Callable[[Path], str] | None] = {  # name -> writes a small root in the real on-disk format
    "cifar10": lambda tmp: _cifar(tmp, "cifar10"),
    "cifar100": lambda tmp: _cifar(tmp, "cifar100"),
    "pacs": lambda tmp: str(make_domain_tree(tmp / "pacs", PACS_LIKE)),
    "officehome": lambda tmp: str(make_domain_tree(tmp / "oh", PACS_LIKE)),
    "domain_folder": lambda tmp: str(make_domain_tree(tmp / "df", PACS_LIKE)),
    "ham10000": lambda tmp: str(make_ham(tmp / "ham")),
    # formats whose writers live inside tests/data/test_vision.py fixtures; loaded there, only errors checked here
    "stl10": None,
    "tinyimagenet": None,
}
# the files-without-code datasets: (dataset_options pointing nowhere, a writer -> (root, dataset_options))
WITH_OPTIONS: dict[str, tuple[Callable[[Path], dict], Callable[[Path], tuple[str | None, dict]]]] = {
    "npz": (lambda tmp: {"path": str(tmp / "nowhere" / "d.npz")}, lambda tmp: (None, {"path": _npz(tmp)})),
    "image_folder": (lambda tmp: {}, lambda tmp: (_image_folder(tmp), {"image_size": 8})),
    "torchvision": (lambda tmp: {"name": "MNIST"}, lambda tmp: (_mnist_raw(tmp), {"name": "MNIST"})),
    "hf": (lambda tmp: {"path": str(tmp / "nowhere" / "d.parquet")}, lambda tmp: (None, _hf_parquet(tmp))),
    "leaf": (lambda tmp: {"path": str(tmp / "nowhere")}, lambda tmp: (None, {"path": _leaf(tmp)})),
}


def _npz(tmp: Path) -> str:
    path = tmp / "d.npz"
    np.savez(path, x_train=RNG.integers(0, 255, (6, 3, 5, 5), dtype=np.uint8), y_train=[0, 1, 2, 0, 1, 2],
             x_test=RNG.integers(0, 255, (2, 3, 5, 5), dtype=np.uint8), y_test=[1, 2])  # fmt: skip
    return str(path)


def _image_folder(tmp: Path) -> str:
    for split, count in (("train", 2), ("test", 1)):
        for label in ("cat", "dog"):
            for i in range(count):
                save_image(tmp / "if" / split / label / f"{i}.png", (10 * i, 80, 200), SIZES[i])
    return str(tmp / "if")


def _hf_parquet(tmp: Path) -> dict:
    """The hub's FEMNIST schema: PNG bytes, an int character, writer_id; one file, its test set carved."""
    rows = [(value, label, f"w{label}") for value in (0, 255) for label in (0, 1, 2)]
    path = write_femnist_parquet(tmp / "femnist.parquet", rows)
    return {"path": str(path), "label": "character", "columns": ["writer_id"], "test_fraction": 0.34}


def _leaf(tmp: Path) -> str:
    write_leaf(tmp / "leaf" / "train", {"u1": ([[0.0] * 4, [1.0] * 4], [0, 1]), "u2": ([[0.5] * 4], [2])})
    write_leaf(tmp / "leaf" / "test", {"u1": ([[1.0] * 4], [2])})
    return str(tmp / "leaf")


def _mnist_raw(tmp: Path) -> str:
    for prefix, n in (("train", 4), ("t10k", 2)):
        write_idx(tmp / "MNIST" / "raw", prefix, RNG.integers(0, 255, (n, 28, 28), dtype=np.uint8),
                  np.arange(n, dtype=np.uint8))  # fmt: skip
    return str(tmp)


def test_every_dataset_has_a_case():
    assert set(DATASETS.names()) == EMBEDDED | set(ROOTS) | set(WITH_OPTIONS), (
        "add it to EMBEDDED, ROOTS or WITH_OPTIONS"
    )


def check_contract(ds: ArrayDataset) -> None:
    assert ds.x_train.dtype == ds.x_test.dtype == np.float32 and ds.x_train.ndim == ds.x_test.ndim == 4
    assert ds.x_train.shape[1:] == ds.x_test.shape[1:] and ds.in_channels in (1, 3)
    assert ds.y_train.dtype == ds.y_test.dtype == np.int64
    assert len(ds.x_train) == len(ds.y_train) > 0 and len(ds.x_test) == len(ds.y_test) > 0
    assert 0 <= ds.y_train.min() and max(ds.y_train.max(), ds.y_test.max()) < ds.num_classes
    assert np.isfinite(ds.x_train).all() and np.isfinite(ds.x_test).all()
    assert not ds.class_names or len(ds.class_names) == ds.num_classes
    assert all(len(values) == len(ds.y_train) for values in ds.columns_train.values())  # one value per sample
    if ds.domains_train is not None:
        assert len(ds.domains_train) == len(ds.y_train) and ds.domains_train.max() < len(ds.domain_names)


@pytest.mark.parametrize("name", DATASETS.names())
def test_a_dataset_loads_to_the_array_contract_or_names_its_missing_root(name, tmp_path):
    if name in EMBEDDED:
        check_contract(load_dataset(name))
        return
    if name == "hf":  # Hugging Face tables: the [data] extra
        pytest.importorskip("datasets")
    if name in WITH_OPTIONS:
        nowhere, writer = WITH_OPTIONS[name]
        with pytest.raises((OSError, ValueError)) as error:
            load_dataset(name, root=str(tmp_path / "nowhere"), options=nowhere(tmp_path))
        assert "nowhere" in str(error.value)  # the message says which file or root it looked in
        root, options = writer(tmp_path)
        check_contract(load_dataset(name, root=root, options=options))
        return
    with pytest.raises((OSError, ValueError)) as error:
        load_dataset(name, root=str(tmp_path / "nowhere"))
    assert "nowhere" in str(error.value)  # the message says which root it looked in
    writer = ROOTS[name]
    if writer is not None:
        check_contract(load_dataset(name, root=writer(tmp_path)))
