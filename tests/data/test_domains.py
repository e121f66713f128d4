"""Behaviour tests for raytune_fl.data.domains: tiny on-disk trees in the real PACS / HAM10000 layouts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import raytune_fl.data.domains  # noqa: F401  (registers the names)
from raytune_fl.data.datasets import DATASETS, ArrayDataset, load_dataset
from tests.support.data_files import HAM_ROWS, PACS_LIKE, make_domain_tree, make_ham, save_image


@pytest.fixture(scope="module")
def pacs_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_domain_tree(tmp_path_factory.mktemp("pacs"), PACS_LIKE)


def channel_means(x: np.ndarray) -> np.ndarray:
    return x.mean(axis=(2, 3))  # (N, 3)


def test_names_registered() -> None:
    for name in ("pacs", "officehome", "domain_folder", "ham10000", "mnist5k_rotated"):
        assert name in DATASETS


def test_domain_folder_shapes_labels_domains(pacs_root: Path) -> None:
    ds = load_dataset("pacs", root=str(pacs_root))
    assert ds.name == "pacs"
    assert ds.domain_names == ("art_painting", "photo", "sketch")
    assert ds.class_names == ("dog", "horse") and ds.num_classes == 2
    assert ds.x_train.shape == (15, 3, 64, 64) and ds.x_test.shape == (3, 3, 64, 64)  # 1 of 6 per domain to test
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int64 and ds.domains_train.dtype == np.int64
    for y, dom in ((ds.y_train, ds.domains_train), (ds.y_test, ds.domains_test)):
        assert len(dom) == len(y) and set(dom) <= {0, 1, 2}
    assert set(ds.domains_train) == set(ds.domains_test) == {0, 1, 2}  # every domain in both splits

    x = np.concatenate([ds.x_train, ds.x_test])
    y = np.concatenate([ds.y_train, ds.y_test])
    dom = np.concatenate([ds.domains_train, ds.domains_test])
    means = channel_means(x)
    # Same class index in every domain: red-dominant images are "dog" (index 0) whatever the domain.
    np.testing.assert_array_equal(means[:, 0] > means[:, 1], y == 0)
    # Domain purity: each domain's blue band lies strictly below the next domain's.
    for d in range(2):
        assert means[dom == d, 2].max() < means[dom == d + 1, 2].min()
    # Train-split per-channel standardisation.
    np.testing.assert_allclose(ds.x_train.mean(axis=(0, 2, 3), dtype=np.float64), 0, atol=1e-4)
    np.testing.assert_allclose(ds.x_train.std(axis=(0, 2, 3), dtype=np.float64), 1, atol=1e-4)


def test_domain_folder_deterministic_and_names(pacs_root: Path, tmp_path: Path) -> None:
    first = load_dataset("pacs", root=str(pacs_root))
    assert load_dataset("pacs", root=str(pacs_root)) is first  # cached per (name, root)
    copy = load_dataset("officehome", root=str(make_domain_tree(tmp_path / "copy", PACS_LIKE)))
    assert copy.name == "officehome"
    for field in ("x_train", "y_train", "x_test", "y_test", "domains_train", "domains_test"):
        np.testing.assert_array_equal(getattr(first, field), getattr(copy, field))


def test_class_list_is_union_across_domains(tmp_path: Path) -> None:
    layout = {"a": {"dog": 2, "horse": 2}, "b": {"horse": 2, "zebra": 2}}
    ds = load_dataset("domain_folder", root=str(make_domain_tree(tmp_path, layout)))
    assert ds.class_names == ("dog", "horse", "zebra") and ds.num_classes == 3
    assert ds.domain_names == ("a", "b")
    y = np.concatenate([ds.y_train, ds.y_test])
    dom = np.concatenate([ds.domains_train, ds.domains_test])
    assert set(y[dom == 0]) == {0, 1} and set(y[dom == 1]) == {1, 2}


def test_domain_folder_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="expected <root>/<domain>/<class>/<images>"):
        load_dataset("pacs")
    with pytest.raises(FileNotFoundError, match=r"pacs: expected <root>/<domain>/<class>/<images>.*not a directory"):
        load_dataset("pacs", root=str(tmp_path / "nope"))
    (tmp_path / "loose").mkdir()
    save_image(tmp_path / "loose" / "img.png", (1, 2, 3), (8, 8))  # image without a class folder
    with pytest.raises(FileNotFoundError, match=r"art_painting.*found no domain folders under .*"):
        load_dataset("pacs", root=str(tmp_path))
    make_domain_tree(tmp_path / "tiny", {"a": {"dog": 2}, "b": {"dog": 1}})
    with pytest.raises(ValueError, match="domain 'b' has 1 image"):
        load_dataset("domain_folder", root=str(tmp_path / "tiny"))
    (tmp_path / "bad" / "a" / "dog").mkdir(parents=True)
    (tmp_path / "bad" / "a" / "dog" / "broken.jpg").write_bytes(b"not a jpeg")
    (tmp_path / "bad" / "a" / "dog" / "broken2.jpg").write_bytes(b"not a jpeg")
    with pytest.raises(ValueError, match="cannot read image .*broken"):
        load_dataset("domain_folder", root=str(tmp_path / "bad"))


def test_a_domain_tree_of_one_class_is_refused(tmp_path):
    root = make_domain_tree(tmp_path / "one", {"a": {"dog": 3}, "b": {"dog": 3}})
    with pytest.raises(ValueError) as error:
        load_dataset("domain_folder", root=str(root))
    assert str(error.value).startswith(f"domain_folder: {root}: every label is 0 (dog): one class, nothing to learn")


# --------------------------------------------------------------------------------------------------- HAM10000


@pytest.fixture(scope="module")
def ham(tmp_path_factory: pytest.TempPathFactory) -> ArrayDataset:
    return load_dataset("ham10000", root=str(make_ham(tmp_path_factory.mktemp("ham"))))


def test_ham10000_layout(ham: ArrayDataset) -> None:
    assert ham.class_names == ("akiec", "bcc", "bkl", "df", "mel", "nv", "vasc") and ham.num_classes == 7
    assert ham.domain_names == ("rosendahl", "vidir_modern")
    assert len(ham.y_train) + len(ham.y_test) == len(HAM_ROWS)
    assert ham.x_train.shape[1:] == (3, 64, 64) and ham.x_test.shape[1:] == (3, 64, 64)
    assert len(ham.domains_train) == len(ham.y_train) and len(ham.domains_test) == len(ham.y_test)
    assert set(ham.domains_train) == set(ham.domains_test) == {0, 1}
    # Labels and domains follow the CSV rows (samples are kept in CSV order within each split).
    expected = sorted((ham.class_names.index(dx), ham.domain_names.index(src)) for _, dx, src in HAM_ROWS)
    got = sorted(zip(np.r_[ham.y_train, ham.y_test].tolist(), np.r_[ham.domains_train, ham.domains_test].tolist()))
    assert got == expected


def test_ham10000_lesions_never_straddle_splits(ham: ArrayDataset) -> None:
    # Row i's image has red = 10 * i (standardisation keeps the order), so ranking by red recovers the CSV row.
    red = channel_means(np.concatenate([ham.x_train, ham.x_test]))[:, 0]
    in_test = np.r_[np.zeros(len(ham.x_train), bool), np.ones(len(ham.x_test), bool)]
    row_in_test = in_test[np.argsort(red)]
    train_lesions = {HAM_ROWS[i][0] for i in np.flatnonzero(~row_in_test)}
    test_lesions = {HAM_ROWS[i][0] for i in np.flatnonzero(row_in_test)}
    assert test_lesions and not train_lesions & test_lesions
    assert any(sum(r[0] == lesion for r in HAM_ROWS) > 1 for lesion in test_lesions | train_lesions)


def test_ham10000_deterministic(ham: ArrayDataset, tmp_path: Path) -> None:
    again = load_dataset("ham10000", root=str(make_ham(tmp_path)))
    for field in ("x_train", "y_train", "x_test", "y_test", "domains_train", "domains_test"):
        np.testing.assert_array_equal(getattr(ham, field), getattr(again, field))


def test_ham10000_images_folder_variant(tmp_path: Path) -> None:
    make_ham(tmp_path / "src")
    (tmp_path / "flat" / "images").mkdir(parents=True)
    for part in ("HAM10000_images_part_1", "HAM10000_images_part_2"):
        for p in (tmp_path / "src" / part).iterdir():
            p.rename(tmp_path / "flat" / "images" / p.name)
    (tmp_path / "src" / "HAM10000_metadata.csv").rename(tmp_path / "flat" / "HAM10000_metadata.csv")
    assert len(load_dataset("ham10000", root=str(tmp_path / "flat")).y_train) > 0


def test_ham10000_errors(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="HAM10000_metadata.csv"):
        load_dataset("ham10000", root=str(tmp_path / "empty"))
    with pytest.raises(FileNotFoundError, match="not a directory"):
        load_dataset("ham10000", root=str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="1 image id.*ISIC_0024309"):
        load_dataset("ham10000", root=str(make_ham(tmp_path / "hole", skip_image=3)))
    bad = make_ham(tmp_path / "baddx", rows=[("HAM_1", "xyz", "rosendahl"), ("HAM_2", "nv", "rosendahl")])
    with pytest.raises(ValueError, match="unknown dx code.*xyz"):
        load_dataset("ham10000", root=str(bad))
    (tmp_path / "nocol").mkdir()
    (tmp_path / "nocol" / "HAM10000_metadata.csv").write_text("lesion_id,image_id,dx\nHAM_1,ISIC_1,nv\n")
    with pytest.raises(ValueError, match="lacks column.*dataset"):
        load_dataset("ham10000", root=str(tmp_path / "nocol"))


# ------------------------------------------------------------------------------------------- mnist5k_rotated


def test_mnist5k_rotated() -> None:
    base, rot = load_dataset("mnist5k"), load_dataset("mnist5k_rotated")
    assert rot.domain_names == ("rot0", "rot15", "rot30", "rot45", "rot60", "rot75")
    assert load_dataset("mnist5k_rotated") is rot
    for split in ("train", "test"):
        x, xb = getattr(rot, f"x_{split}"), getattr(base, f"x_{split}")
        dom = getattr(rot, f"domains_{split}")
        assert x.shape == xb.shape and x.dtype == np.float32 and len(dom) == len(x)
        np.testing.assert_array_equal(getattr(rot, f"y_{split}"), getattr(base, f"y_{split}"))
        counts = np.bincount(dom, minlength=6)
        assert len(counts) == 6 and counts.max() - counts.min() <= 1
        expected = np.empty(len(x), np.int64)
        expected[np.random.default_rng(0).permutation(len(x))] = np.arange(len(x)) % 6
        np.testing.assert_array_equal(dom, expected)
        np.testing.assert_array_equal(x[dom == 0], xb[dom == 0])  # rot0 is the original image
        for d in range(1, 6):
            rotated = x[dom == d]
            assert not np.allclose(rotated, xb[dom == d])
            assert rotated.min() >= xb.min() - 1e-5 and rotated.max() <= xb.max() + 1e-5  # bilinear, no overshoot
            np.testing.assert_allclose(rotated[:, 0, 0, 0], xb.min(), atol=1e-5)  # corners filled with background
    assert not np.shares_memory(rot.x_train, base.x_train)
