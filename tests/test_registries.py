"""Conformance over every registry a search-space file names into (models, partitioners, datasets), as
tests/test_conformance.py does for the methods: each registered name must have a case here, so a new entry that
is not checked fails loudly instead of passing silently."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

import raytune_fl.models  # noqa: F401  (registers the models)
from raytune_fl.data import DATASETS, ArrayDataset, load_dataset
from raytune_fl.data.partition import PARTITIONERS, partition
from raytune_fl.models.registry import MODELS, build_model

from .test_domain_data import PACS_LIKE, make_domain_tree, make_ham
from .test_vision_data import dump, write_cifar

# ---- models: factory(in_channels, num_classes, image_size) -> forward returns (logits, representation) ---------

MODEL_INPUTS = {"simple_cnn": [(1, 28), (3, 32)], "resnet18": [(3, 32)], "resnet50": [(3, 32)]}


def test_every_model_has_a_case():
    assert set(MODELS.names()) == set(MODEL_INPUTS), "add the new model to MODEL_INPUTS"


@pytest.mark.parametrize("name", MODELS.names())
def test_a_model_returns_logits_and_a_representation_and_learns(name):
    for channels, size in MODEL_INPUTS[name]:
        torch.manual_seed(0)
        model = build_model(name, channels, 7, (size, size))
        initial = {k: v.clone() for k, v in model.state_dict().items()}
        x, y = torch.randn(4, channels, size, size), torch.tensor([0, 1, 2, 6])
        logits, z = model(x)
        assert logits.shape == (4, 7) and z.dim() == 2 and z.shape[0] == 4, (logits.shape, z.shape)
        assert torch.isfinite(logits).all() and torch.isfinite(z).all()
        torch.nn.functional.cross_entropy(logits, y).backward()
        trainable = [p for p in model.parameters() if p.requires_grad]
        assert trainable and all(p.grad is not None for p in trainable), "a parameter gets no gradient"
        torch.manual_seed(0)  # same seed, same initial weights: every method and variant starts alike
        again = build_model(name, channels, 7, (size, size))
        assert all(torch.equal(initial[k], v) for k, v in again.state_dict().items())


# ---- partitioners: (labels, clients, seed, min_size, domains, **kind settings) -> index arrays ------------------

PARTITION_CASES: dict[str, tuple[int, dict]] = {  # kind -> (clients, its settings)
    "iid": (5, {}),
    "dirichlet": (5, {"alpha": 0.3}),
    "shards": (5, {"classes_per_client": 2}),
    "quantity_skew": (5, {"alpha": 1.0}),
    "domain": (3, {}),  # one client per domain
    "domain_split": (6, {}),  # a multiple of the domains
}


def test_every_partitioner_has_a_case():
    assert set(PARTITIONERS.names()) == set(PARTITION_CASES), "add the new partitioner to PARTITION_CASES"


@pytest.mark.parametrize("kind", PARTITIONERS.names())
def test_a_partition_is_disjoint_complete_sorted_and_seeded(kind):
    labels = np.random.default_rng(1).permutation(np.repeat(np.arange(10), 60)).astype(np.int64)
    domains = np.random.default_rng(2).integers(0, 3, len(labels)).astype(np.int64)
    clients, settings = PARTITION_CASES[kind]

    def draw(seed: int) -> list[np.ndarray]:
        return partition(kind, labels, clients, seed=seed, min_size=5, domains=domains, **settings)

    parts = draw(0)
    assert len(parts) == clients and all(len(p) >= 5 for p in parts)
    assert all(np.array_equal(p, np.sort(p)) and np.issubdtype(p.dtype, np.integer) for p in parts)
    everything = np.concatenate(parts)
    assert len(everything) == len(np.unique(everything)) == len(labels)  # each sample with exactly one client
    assert all(np.array_equal(a, b) for a, b in zip(parts, draw(0)))  # the same seed, the same partition


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
    # formats whose writers live inside tests/test_vision_data.py fixtures; loaded there, only errors checked here
    "stl10": None,
    "tinyimagenet": None,
}


def test_every_dataset_has_a_case():
    assert set(DATASETS.names()) == EMBEDDED | set(ROOTS), "add the new dataset to EMBEDDED or ROOTS"


def check_contract(ds: ArrayDataset) -> None:
    assert ds.x_train.dtype == ds.x_test.dtype == np.float32 and ds.x_train.ndim == ds.x_test.ndim == 4
    assert ds.x_train.shape[1:] == ds.x_test.shape[1:] and ds.in_channels in (1, 3)
    assert ds.y_train.dtype == ds.y_test.dtype == np.int64
    assert len(ds.x_train) == len(ds.y_train) > 0 and len(ds.x_test) == len(ds.y_test) > 0
    assert 0 <= ds.y_train.min() and max(ds.y_train.max(), ds.y_test.max()) < ds.num_classes
    assert np.isfinite(ds.x_train).all() and np.isfinite(ds.x_test).all()
    assert not ds.class_names or len(ds.class_names) == ds.num_classes
    if ds.domains_train is not None:
        assert len(ds.domains_train) == len(ds.y_train) and ds.domains_train.max() < len(ds.domain_names)


@pytest.mark.parametrize("name", DATASETS.names())
def test_a_dataset_loads_to_the_array_contract_or_names_its_missing_root(name, tmp_path):
    if name in EMBEDDED:
        check_contract(load_dataset(name))
        return
    with pytest.raises((OSError, ValueError)) as error:
        load_dataset(name, root=str(tmp_path / "nowhere"))
    assert "nowhere" in str(error.value)  # the message says which root it looked in
    writer = ROOTS[name]
    if writer is not None:
        check_contract(load_dataset(name, root=writer(tmp_path)))
