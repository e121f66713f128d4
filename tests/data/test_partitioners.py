"""Behaviour tests for the label-skew, quantity-skew and feature-shift partitioners and the partition record."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from raytune_fl.data.partition import PARTITIONERS, PartitionError, client_domains, partition
from raytune_fl.data.record import partition_heatmap, partition_table, save_partition_parquet
from raytune_fl.data.split import label_histogram
from tests.support.data_files import assert_valid_partition

NEW_KINDS = ("shards", "quantity_skew", "domain", "domain_split")


@pytest.fixture(scope="module")
def labels() -> np.ndarray:
    """2,000 samples, 10 balanced classes (200 each), shuffled."""
    return np.random.default_rng(42).permutation(np.repeat(np.arange(10), 200)).astype(np.int64)


@pytest.fixture(scope="module")
def domains(labels: np.ndarray) -> np.ndarray:
    """3 domains of unequal size (ids 0, 2, 5: not contiguous), independent of the labels."""
    return np.random.default_rng(7).choice(np.array([0, 2, 5]), size=len(labels), p=[0.5, 0.3, 0.2]).astype(np.int64)


# settings of each new kind for the generic checks: (kind, num_clients, kwargs)
CASES = [
    ("shards", 10, {"classes_per_client": 2}),
    ("shards", 7, {"classes_per_client": 3}),
    ("quantity_skew", 8, {"alpha": 0.5}),
    ("quantity_skew", 8, {"alpha": 5.0}),
    ("domain", 3, {}),
    ("domain_split", 6, {}),
    ("domain_split", 9, {"alpha": 0.3}),
]


def run(kind: str, labels: np.ndarray, domains: np.ndarray, k: int, seed: int, **kw) -> list[np.ndarray]:
    return partition(kind, labels, k, seed=seed, domains=domains, **kw)


def test_new_kinds_are_registered() -> None:
    assert set(NEW_KINDS) | {"iid", "dirichlet"} <= set(PARTITIONERS.names())


@pytest.mark.parametrize("seed", [0, 3])
@pytest.mark.parametrize("kind,k,kw", CASES)
def test_disjoint_complete_sorted(labels, domains, kind: str, k: int, kw: dict, seed: int) -> None:
    parts = run(kind, labels, domains, k, seed, min_size=10, **kw)
    assert_valid_partition(parts, len(labels), k)
    assert min(len(p) for p in parts) >= 10


@pytest.mark.parametrize("kind,k,kw", [c for c in CASES if c[0] != "domain"])
def test_deterministic_per_seed(labels, domains, kind: str, k: int, kw: dict) -> None:
    a, b, c = (run(kind, labels, domains, k, s, **kw) for s in (1, 1, 2))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))


def test_domain_is_deterministic_and_seed_free(labels, domains) -> None:
    a, b = (run("domain", labels, domains, 3, s) for s in (0, 9))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))


# ---------------------------------------------------------------- shards


@pytest.mark.parametrize("k,cpc", [(10, 2), (20, 2), (5, 4), (20, 1), (25, 2)])
def test_shards_clients_see_at_most_classes_per_client_labels(labels, k: int, cpc: int) -> None:
    # 200 per class divides evenly into shards of 2000 / (k * cpc) samples: every shard holds one label.
    parts = partition("shards", labels, k, seed=0, classes_per_client=cpc)
    assert_valid_partition(parts, len(labels), k)
    hist = label_histogram(labels, parts, 10)
    assert ((hist > 0).sum(axis=1) <= cpc).all()
    assert {len(p) for p in parts} == {2000 // k}


def test_shards_min_size_redraws_then_fails() -> None:
    # 10 samples in 6 shards (2, 2, 2, 2, 1, 1); 2 clients x 3 shards reach 5 + 5 only with the 1s apart.
    labels = np.arange(10, dtype=np.int64) % 3
    for seed in range(10):
        parts = partition("shards", labels, 2, seed=seed, classes_per_client=3, min_size=5)
        assert [len(p) for p in parts] == [5, 5]
        assert_valid_partition(parts, 10, 2)
    # seed 3's first deal gives the 1s to one client (sizes 4 and 6): with one draw allowed it gives up.
    with pytest.raises(PartitionError) as e:
        partition("shards", labels, 2, seed=3, classes_per_client=3, min_size=5, max_redraws=1)
    for part in ("shards: no deal in 1", "min_size=5", "6 shards of 1..2 samples", "best deal: 4", "max_redraws"):
        assert part in str(e.value)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_shards_rejects_bad_classes_per_client(labels, bad) -> None:
    with pytest.raises(PartitionError, match="classes_per_client must be an integer >= 1"):
        partition("shards", labels, 5, seed=0, classes_per_client=bad)


def test_shards_more_shards_than_samples() -> None:
    with pytest.raises(PartitionError, match="classes_per_client=4 = 12 shards exceeds the 10 samples"):
        partition("shards", np.zeros(10, dtype=np.int64), 3, seed=0, classes_per_client=4, min_size=0)


# ---------------------------------------------------------------- quantity skew


def test_quantity_skew_sizes_vary_labels_stay_iid(labels) -> None:
    iid_sizes = [len(p) for p in partition("iid", labels, 8, seed=0)]
    parts = partition("quantity_skew", labels, 8, seed=0, alpha=0.5, min_size=20)
    sizes = np.array([len(p) for p in parts])
    assert sizes.std() > np.std(iid_sizes) + 50
    global_share = np.bincount(labels, minlength=10) / len(labels)
    hist = label_histogram(labels, parts, 10)
    for size, row in zip(sizes, hist):
        if size >= 300:
            assert np.abs(row / size - global_share).max() < 0.06


def test_quantity_skew_smaller_alpha_more_uneven(labels) -> None:
    def spread(alpha: float) -> float:
        return float(
            np.mean(
                [
                    np.std([len(p) for p in partition("quantity_skew", labels, 10, seed=s, alpha=alpha)])
                    for s in range(5)
                ]
            )
        )

    assert spread(0.2) > 2 * spread(50.0)


def test_quantity_skew_min_size_and_giving_up(labels) -> None:
    parts = partition("quantity_skew", labels, 10, seed=1, alpha=0.5, min_size=60)
    assert min(len(p) for p in parts) >= 60
    with pytest.raises(PartitionError) as e:
        partition("quantity_skew", labels, 20, seed=0, alpha=0.01, min_size=90, max_redraws=20)
    for part in ("quantity_skew", "20", "min_size=90", "alpha=0.01", "raise alpha"):
        assert part in str(e.value)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf"), "1"])
def test_quantity_skew_rejects_bad_alpha(labels, bad) -> None:
    with pytest.raises(PartitionError, match="alpha must be a finite number > 0"):
        partition("quantity_skew", labels, 4, seed=0, alpha=bad)


# ---------------------------------------------------------------- feature shift


def test_domain_one_pure_client_per_domain(labels, domains) -> None:
    parts = run("domain", labels, domains, 3, 0)
    assert client_domains(parts, domains) == [0, 2, 5]
    for d, p in zip([0, 2, 5], parts):
        np.testing.assert_array_equal(p, np.flatnonzero(domains == d))


def test_domain_split_purity_order_and_sizes(labels, domains) -> None:
    parts = run("domain_split", labels, domains, 12, 0)
    assert_valid_partition(parts, len(labels), 12)
    assert client_domains(parts, domains) == [0] * 4 + [2] * 4 + [5] * 4
    for j, d in enumerate([0, 2, 5]):
        sizes = [len(p) for p in parts[4 * j : 4 * j + 4]]
        assert sum(sizes) == (domains == d).sum() and max(sizes) - min(sizes) <= 1


def test_domain_split_alpha_gives_label_skew(labels, domains) -> None:
    def top_share(**kw) -> float:
        parts = run("domain_split", labels, domains, 15, 0, **kw)
        assert_valid_partition(parts, len(labels), 15)
        assert client_domains(parts, domains) == [0] * 5 + [2] * 5 + [5] * 5
        h = label_histogram(labels, parts, 10)
        return float((h.max(axis=1) / h.sum(axis=1)).mean())

    assert top_share(alpha=0.1) > top_share() + 0.25
    assert top_share(alpha=None) == top_share()  # None means "not given": IID within each domain


def test_client_domains_mixed_and_missing() -> None:
    domains = np.array([0, 0, 1, 1])
    parts = [np.array([0, 1]), np.array([2, 3]), np.array([1, 2]), np.zeros(0, np.int64)]
    assert client_domains(parts, domains) == [0, 1, None, None]
    assert client_domains(parts, None) == [None] * 4


@pytest.mark.parametrize("kind,k", [("domain", 3), ("domain_split", 6)])
def test_domain_kinds_need_domains(labels, kind: str, k: int) -> None:
    with pytest.raises(PartitionError, match=f"partition.kind '{kind}' needs a dataset with domains"):
        partition(kind, labels, k, seed=0)


def test_domain_wrong_client_count_names_the_domains(labels, domains) -> None:
    with pytest.raises(PartitionError, match=r"num_clients=4 but the dataset has 3 domains.*num_clients=3"):
        run("domain", labels, domains, 4, 0)


def test_domain_split_needs_a_multiple(labels, domains) -> None:
    with pytest.raises(PartitionError, match="num_clients=7 is not a multiple of the 3 domains"):
        run("domain_split", labels, domains, 7, 0)


def test_domain_min_size_names_the_domain(labels, domains) -> None:
    small = int((domains == 5).sum())
    with pytest.raises(PartitionError, match=f"domain 5 has {small} samples < min_size={small + 1}"):
        run("domain", labels, domains, 3, 0, min_size=small + 1)
    with pytest.raises(PartitionError, match=r"domain_split: domain 5 \(\d+ samples\): impossible"):
        run("domain_split", labels, domains, 6, 0, min_size=small // 2 + 1)


@pytest.mark.parametrize(
    "bad,field",
    [
        (np.zeros(5, dtype=np.int64), "domains has 5 entries but labels has 2000"),
        (np.zeros(2000), "domains must be a 1-D integer array"),
        (np.full(2000, -1), "non-negative"),
    ],
)
def test_bad_domains_array(labels, bad: np.ndarray, field: str) -> None:
    with pytest.raises(PartitionError, match=field):
        partition("domain", labels, 1, seed=0, domains=bad)


def test_domains_ignored_by_label_skew_kinds(labels, domains) -> None:
    a = partition("dirichlet", labels, 5, seed=0, alpha=0.5)
    b = partition("dirichlet", labels, 5, seed=0, alpha=0.5, domains=domains)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))


# ---------------------------------------------------------------- dispatch: kind-specific kwargs


@pytest.mark.parametrize(
    "kind,kw,field",
    [
        ("shards", {"alpha": 0.5}, "partition.alpha is not used by 'shards'"),
        ("iid", {"alpha": 0.5}, "partition.alpha is not used by 'iid'"),
        ("dirichlet", {"classes_per_client": 2}, "partition.classes_per_client is not used by 'dirichlet'"),
        ("domain", {"alpha": 0.1}, "partition.alpha is not used by 'domain'"),
        ("shards", {}, "partition.classes_per_client is required by 'shards'"),
        ("quantity_skew", {}, "partition.alpha is required by 'quantity_skew'"),
    ],
)
def test_kwargs_checked_per_kind(labels, domains, kind: str, kw: dict, field: str) -> None:
    with pytest.raises(PartitionError, match=field):
        partition(kind, labels, 3, seed=0, domains=domains, **kw)


def test_none_kwargs_are_dropped(labels, domains) -> None:
    a = partition("shards", labels, 5, seed=0, classes_per_client=2, alpha=None, max_redraws=None)
    b = partition("shards", labels, 5, seed=0, classes_per_client=2)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    partition("iid", labels, 5, seed=0, alpha=None, classes_per_client=None, domains=domains)


# ---------------------------------------------------------------- record


def hand_table(**kw) -> pd.DataFrame:
    labels = np.array([0, 0, 1, 2, 2, 2])
    return partition_table(labels, [np.array([0, 2]), np.array([1, 3, 4, 5])], 3, **kw)


def test_partition_table_counts() -> None:
    table = hand_table()
    assert list(table.columns) == ["client", "num_samples", "domain", "class_0", "class_1", "class_2"]
    assert table["client"].tolist() == [0, 1] and table["num_samples"].tolist() == [2, 4]
    assert table[["class_0", "class_1", "class_2"]].to_numpy().tolist() == [[1, 1, 0], [1, 0, 3]]
    assert table["domain"].tolist() == [None, None]


def test_partition_table_names_and_domains() -> None:
    domains = np.array([1, 0, 1, 0, 0, 0])
    table = hand_table(class_names=("cat", "dog", "owl"), domains=domains, domain_names=("photo", "sketch"))
    assert list(table.columns) == ["client", "num_samples", "domain", "cat", "dog", "owl"]
    assert table["domain"].tolist() == ["sketch", "photo"]
    mixed = hand_table(domains=np.array([0, 1, 0, 0, 0, 0]))
    assert mixed["domain"].tolist() == ["domain_0", None]
    with pytest.raises(ValueError, match="class_names has 2 names"):
        hand_table(class_names=("a", "b"))
    with pytest.raises(ValueError, match="distinct"):
        hand_table(class_names=("a", "a", "domain"))


def test_parquet_round_trip(tmp_path: Path) -> None:
    for table in (hand_table(domains=np.array([1, 0, 1, 0, 0, 0]), domain_names=("photo", "sketch")), hand_table()):
        path = save_partition_parquet(table, tmp_path / "sub" / "partition.parquet")
        back = pd.read_parquet(path)
        assert list(back.columns) == list(table.columns)
        pd.testing.assert_frame_equal(back.drop(columns="domain"), table.drop(columns="domain"))
        assert [None if pd.isna(d) else d for d in back["domain"]] == table["domain"].tolist()


@pytest.mark.parametrize("k", [2, 30])
def test_heatmap_png(tmp_path: Path, labels, domains, k: int) -> None:
    if k == 2:
        table = hand_table(domains=np.array([1, 0, 1, 0, 0, 0]), domain_names=("photo", "sketch"))
    else:
        parts = partition("domain_split", labels, k, seed=0, domains=domains, alpha=0.5)
        table = partition_table(labels, parts, 10, domains=domains)
    path = partition_heatmap(table, tmp_path / "map.png", "partition: test")
    assert path == tmp_path / "map.png"
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
