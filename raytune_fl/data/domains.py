"""Feature-shift datasets: every sample carries the domain it comes from.

Registers into ``DATASETS`` (import this module to make the names available):

* ``pacs``, ``officehome``, ``domain_folder``: a DomainBed-style tree ``<root>/<domain>/<class>/<image files>``.
* ``ham10000``: skin-lesion images whose domain is the source clinic (the metadata's ``dataset`` column).
* ``mnist5k_rotated``: the embedded ``mnist5k`` digits rotated by DomainBed's Rotated-MNIST angles (offline).

File-backed datasets read a local ``root`` (nothing is downloaded), resize every image to ``IMAGE_SIZE`` square
RGB, and standardise each channel with train-split statistics. Train/test is an 80/20 seeded split made inside
each domain, so every domain appears in both splits.
Loads are cached per (name, resolved root), so files changed on disk later are not re-read in-process.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
from PIL import Image

from raytune_fl.data.datasets import ArrayDataset, check_classes, load_dataset, register_builtin

# 64x64 rather than PACS's native 227/224: ~12x less memory and compute, which federated sweeps multiply.
IMAGE_SIZE = 64
TEST_FRACTION = 0.2
SEED = 0
IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp"})

FOLDER_LAYOUT = "<root>/<domain>/<class>/<images>"
# Only used in error messages: any domain folders that exist are accepted.
KNOWN_DOMAINS = {
    "pacs": ("art_painting", "cartoon", "photo", "sketch"),
    "officehome": ("Art", "Clipart", "Product", "Real_World"),
}

HAM_CSV = "HAM10000_metadata.csv"
HAM_IMAGE_DIRS = ("HAM10000_images_part_1", "HAM10000_images_part_2", "images")
HAM_COLUMNS = ("lesion_id", "image_id", "dx", "dataset")
HAM_CLASSES = ("akiec", "bcc", "bkl", "df", "mel", "nv", "vasc")
HAM_LAYOUT = f"<root>/{HAM_CSV} and <root>/{{{','.join(HAM_IMAGE_DIRS)}}}/<image_id>.jpg"

ROTATIONS = (0, 15, 30, 45, 60, 75)  # degrees, as in DomainBed's Rotated MNIST


# ----------------------------------------------------------------------------------------------- shared helpers


def _resolve_root(name: str, root: str | None, layout: str) -> Path:
    if root is None:
        raise ValueError(f"{name}: needs root=<directory>; expected {layout}")
    path = Path(root).expanduser().resolve()
    if not path.is_dir():
        raise FileNotFoundError(f"{name}: expected {layout}; root {path} is not a directory")
    return path


def _read_image(path: Path, size: int) -> np.ndarray:
    """One image as uint8 (3, size, size): RGB (drops alpha, expands grey), resized without keeping aspect."""
    try:
        with Image.open(path) as image:
            image.draft("RGB", (size, size))  # JPEG only: decode at reduced scale, much faster for large photos
            rgb = image.convert("RGB").resize((size, size), Image.Resampling.BILINEAR)
    except OSError as err:  # includes PIL.UnidentifiedImageError
        raise ValueError(f"cannot read image {path}: {err}") from err
    return np.asarray(rgb, dtype=np.uint8).transpose(2, 0, 1)


def _read_images(paths: Sequence[Path], size: int = IMAGE_SIZE) -> np.ndarray:
    """uint8 (N, 3, size, size); threads, as PIL releases the GIL while decoding."""
    with ThreadPoolExecutor() as pool:
        return np.stack(list(pool.map(functools.partial(_read_image, size=size), paths)))


def _standardise(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Scale uint8 pixels to [0, 1], then standardise each channel with the train split's mean and std."""
    levels = np.arange(256) / 255.0
    mean, std = np.empty(train.shape[1], np.float32), np.empty(train.shape[1], np.float32)
    for c in range(train.shape[1]):
        # A 256-bin histogram gives exact statistics without a float64 copy of the whole split.
        counts = np.bincount(train[:, c].ravel(), minlength=256) / train[:, c].size
        mean[c] = counts @ levels
        std[c] = np.sqrt(counts @ (levels - mean[c]) ** 2) or 1.0  # a constant channel stays unscaled
    scaled = []
    for pixels in (train, test):
        x = pixels.astype(np.float32) / np.float32(255.0)
        x -= mean[:, None, None]
        x /= std[:, None, None]
        scaled.append(x)
    return scaled[0], scaled[1]


def _split_per_domain(
    domains: np.ndarray,
    domain_names: Sequence[str],
    groups: np.ndarray | None = None,
    test_fraction: float = TEST_FRACTION,
) -> tuple[np.ndarray, np.ndarray]:
    """Sorted (train, test) indices from a seeded 80/20 split inside each domain.

    ``groups`` (e.g. lesion ids) are kept whole: whole groups are drawn for the test side until it holds
    ``round(test_fraction * n)`` samples. Every domain needs two groups so it lands in both splits. A group that
    spans domains is split with the domain of its first sample. Each domain draws from a fresh
    ``default_rng(SEED)`` so its split does not depend on which other domains exist.
    """
    if groups is None:
        groups = np.arange(len(domains))
    _, first, group_of = np.unique(groups, return_index=True, return_inverse=True)
    group_domain, group_size = domains[first], np.bincount(group_of)
    test_group = np.zeros(len(first), dtype=bool)
    for domain in np.unique(group_domain):
        members = np.flatnonzero(group_domain == domain)
        if len(members) < 2:
            raise ValueError(
                f"domain {domain_names[domain]!r} has {len(members)} image (group); needs >= 2 to be in train and test"
            )
        members = np.random.default_rng(SEED).permutation(members)
        cumulative = np.cumsum(group_size[members])
        target = max(1, round(test_fraction * cumulative[-1]))
        n_test = min(int(np.searchsorted(cumulative, target)) + 1, len(members) - 1)
        test_group[members[:n_test]] = True
    is_test = test_group[group_of]
    return np.flatnonzero(~is_test), np.flatnonzero(is_test)


def _build(
    name: str,
    paths: Sequence[Path],
    labels: np.ndarray,
    domains: np.ndarray,
    class_names: Sequence[str] | np.ndarray,  # np.unique's names come as an array of numpy strings
    domain_names: Sequence[str] | np.ndarray,
    groups: np.ndarray | None = None,
) -> ArrayDataset:
    """Read, split per domain and standardise images into an ArrayDataset."""
    domain_names, class_names = tuple(map(str, domain_names)), tuple(map(str, class_names))  # not np.str_
    try:
        train, test = _split_per_domain(domains, domain_names, groups)
    except ValueError as err:
        raise ValueError(f"{name}: {err}") from None
    pixels = _read_images(paths)
    x_train, x_test = _standardise(pixels[train], pixels[test])
    labels, domains = labels.astype(np.int64), domains.astype(np.int64)
    return ArrayDataset(
        name=name,
        x_train=x_train,
        y_train=labels[train],
        x_test=x_test,
        y_test=labels[test],
        num_classes=len(class_names),
        domains_train=domains[train],
        domains_test=domains[test],
        domain_names=domain_names,
        class_names=class_names,
    )


# ------------------------------------------------------------------------------------- domain-folder datasets


def pacs(root: str | None = None) -> ArrayDataset:
    """PACS (DomainBed layout): art_painting, cartoon, photo, sketch x 7 classes."""
    return _domain_folder("pacs", _resolve_root("pacs", root, FOLDER_LAYOUT))


register_builtin("pacs", pacs)


def officehome(root: str | None = None) -> ArrayDataset:
    """Office-Home: Art, Clipart, Product, Real_World x 65 classes."""
    return _domain_folder("officehome", _resolve_root("officehome", root, FOLDER_LAYOUT))


register_builtin("officehome", officehome)


def domain_folder(root: str | None = None) -> ArrayDataset:
    """Any DomainBed-style tree <root>/<domain>/<class>/<images>."""
    return _domain_folder("domain_folder", _resolve_root("domain_folder", root, FOLDER_LAYOUT))


register_builtin("domain_folder", domain_folder)


@functools.lru_cache(maxsize=4)
def _domain_folder(name: str, root: Path) -> ArrayDataset:
    # Domains and classes are whatever folders hold images; hidden ones (.git, .ipynb_checkpoints) are skipped.
    paths = sorted(
        p
        for p in root.glob("*/*/*")
        if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file() and not any(s.startswith(".") for s in p.parts[-3:])
    )
    if not paths:
        known = KNOWN_DOMAINS.get(name)
        hint = f" (e.g. {', '.join(known)})" if known else ""
        raise FileNotFoundError(f"{name}: expected {FOLDER_LAYOUT}{hint}; found no domain folders under {root}")
    # Sorted unique names: the same class folder name gets the same index in every domain.
    domain_names, domains = np.unique([p.parent.parent.name for p in paths], return_inverse=True)
    class_names, labels = np.unique([p.parent.name for p in paths], return_inverse=True)
    built = _build(name, paths, labels, domains, class_names, domain_names)
    # a user's tree may hold one class, or a class whose few images all fell to the test side of the split
    check_classes(f"{name}: {root}", built.y_train, built.y_test, built.num_classes, built.class_names)
    return built


# -------------------------------------------------------------------------------------------------- HAM10000


def ham10000(root: str | None = None) -> ArrayDataset:
    """HAM10000 dermoscopy: 7 diagnoses (``dx``); domain = source clinic (``dataset`` column)."""
    return _ham10000(_resolve_root("ham10000", root, HAM_LAYOUT))


register_builtin("ham10000", ham10000)


@functools.lru_cache(maxsize=2)
def _ham10000(root: Path) -> ArrayDataset:
    import pandas as pd  # lazy: only this loader needs it

    csv = root / HAM_CSV
    if not csv.is_file():
        raise FileNotFoundError(f"ham10000: expected {HAM_LAYOUT}; missing {csv}")
    meta = pd.read_csv(csv, dtype=str)
    missing_columns = [c for c in HAM_COLUMNS if c not in meta.columns]
    if missing_columns:
        raise ValueError(f"ham10000: {csv} lacks column(s) {missing_columns}; needs {HAM_COLUMNS}")
    if meta.empty or meta[list(HAM_COLUMNS)].isna().any().any():
        raise ValueError(f"ham10000: {csv} has no rows or empty values in {HAM_COLUMNS}")
    unknown = sorted(set(meta["dx"]) - set(HAM_CLASSES))
    if unknown:
        raise ValueError(f"ham10000: {csv} has unknown dx code(s) {unknown}; known: {HAM_CLASSES}")

    images = {
        p.stem: p
        for folder in HAM_IMAGE_DIRS
        if (root / folder).is_dir()
        for p in sorted((root / folder).iterdir())
        if p.suffix.lower() == ".jpg"
    }
    missing = [i for i in meta["image_id"] if i not in images]
    if missing:
        raise FileNotFoundError(
            f"ham10000: expected {HAM_LAYOUT}; {len(missing)} image id(s) from {csv.name} not found under {root}: "
            f"{', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}"
        )
    domain_names, domains = np.unique(meta["dataset"].to_numpy(str), return_inverse=True)
    labels = np.array([HAM_CLASSES.index(dx) for dx in meta["dx"]])
    # Grouped by lesion: one lesion is often photographed several times, and near-duplicates on both sides
    # would leak test images into training and inflate test accuracy.
    paths = [images[i] for i in meta["image_id"]]
    return _build("ham10000", paths, labels, domains, HAM_CLASSES, domain_names, groups=meta["lesion_id"].to_numpy(str))


# ------------------------------------------------------------------------------------------- mnist5k_rotated


def mnist5k_rotated(root: str | None = None) -> ArrayDataset:
    """mnist5k (same splits and labels), each image rotated by one of ``ROTATIONS`` (its domain)."""
    return _mnist5k_rotated()


register_builtin("mnist5k_rotated", mnist5k_rotated)


def _round_robin_domains(n: int, n_domains: int) -> np.ndarray:
    """Domain per sample from a seeded permutation dealt round-robin: domain sizes differ by at most 1."""
    domains = np.empty(n, dtype=np.int64)
    domains[np.random.default_rng(SEED).permutation(n)] = np.arange(n) % n_domains
    return domains


@functools.lru_cache(maxsize=1)
def _mnist5k_rotated() -> ArrayDataset:
    import torch
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms.v2 import functional as F

    base = load_dataset("mnist5k")
    # Rotating the normalised images is exact here: bilinear interpolation commutes with the affine
    # normalisation, provided the fill is the normalised background (0 -> its minimum pixel value).
    background = float(min(base.x_train.min(), base.x_test.min()))

    def rotate(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        domains = _round_robin_domains(len(x), len(ROTATIONS))
        out = x.copy()  # the mnist5k arrays are cached and shared: never edit them in place
        for d, angle in enumerate(ROTATIONS):
            if angle:  # angle 0 stays bit-identical to mnist5k
                batch = torch.from_numpy(out[domains == d])
                rotated = F.rotate(batch, angle, interpolation=InterpolationMode.BILINEAR, fill=background)
                out[domains == d] = rotated.numpy()
        return out, domains

    x_train, domains_train = rotate(base.x_train)
    x_test, domains_test = rotate(base.x_test)
    return replace(
        base,
        name="mnist5k_rotated",
        x_train=x_train,
        x_test=x_test,
        domains_train=domains_train,
        domains_test=domains_test,
        domain_names=tuple(f"rot{a}" for a in ROTATIONS),
        class_names=base.class_names or tuple(str(c) for c in range(base.num_classes)),
    )
