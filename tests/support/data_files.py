"""Tiny files in the real on-disk formats (PACS-like domain trees, HAM10000, CIFAR python batches) and the
partition invariants: shared by the data tests and the registries' conformance."""

from __future__ import annotations

import gzip
import io
import json
import pickle
import struct
import tarfile
from pathlib import Path

import numpy as np
from PIL import Image

RNG = np.random.default_rng(0)


SIZES = [(20, 30), (50, 40), (97, 64), (13, 13)]  # (width, height): all differ from 64x64


def save_image(path: Path, rgb: tuple[int, int, int], size: tuple[int, int], mode: str = "RGB") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, rgb).convert(mode).save(path)


def make_domain_tree(root: Path, layout: dict[str, dict[str, int]]) -> Path:
    """Solid images: red = class "dog", green = class "horse", blue = the domain's rank (one band per domain)."""
    for d, (domain, classes) in enumerate(sorted(layout.items())):
        for cls, n in classes.items():
            for i in range(n):
                rgb = (255 if cls == "dog" else 0, 255 if cls == "horse" else 0, 40 + 80 * d + 5 * i)
                suffix, mode = [(".png", "RGB"), (".jpg", "RGB"), (".png", "RGBA")][i % 3]
                save_image(root / domain / cls / f"{cls}_{i}{suffix}", rgb, SIZES[i % len(SIZES)], mode)
            (root / domain / cls / "notes.txt").write_text("not an image")
    (root / "README.txt").write_text("stray file")
    (root / ".cache" / "x" / "hidden.png").parent.mkdir(parents=True)
    save_image(root / ".cache" / "x" / "hidden.png", (1, 2, 3), (8, 8))
    return root


PACS_LIKE = {domain: {"dog": 3, "horse": 3} for domain in ("art_painting", "photo", "sketch")}


HAM_ROWS = [  # lesion_id, dx, dataset source
    ("HAM_0000001", "nv", "vidir_modern"),
    ("HAM_0000001", "nv", "vidir_modern"),
    ("HAM_0000001", "nv", "vidir_modern"),
    ("HAM_0000002", "mel", "vidir_modern"),
    ("HAM_0000002", "mel", "vidir_modern"),
    ("HAM_0000003", "bkl", "vidir_modern"),
    ("HAM_0000004", "nv", "vidir_modern"),
    ("HAM_0000005", "bcc", "vidir_modern"),
    ("HAM_0000006", "akiec", "rosendahl"),
    ("HAM_0000006", "akiec", "rosendahl"),
    ("HAM_0000007", "bkl", "rosendahl"),
    ("HAM_0000007", "bkl", "rosendahl"),
    ("HAM_0000008", "vasc", "rosendahl"),
    ("HAM_0000009", "df", "rosendahl"),
]


def make_ham(root: Path, rows: list[tuple[str, str, str]] = HAM_ROWS, skip_image: int | None = None) -> Path:
    lines = ["lesion_id,image_id,dx,dx_type,age,sex,localization,dataset"]
    for i, (lesion, dx, source) in enumerate(rows):
        image_id = f"ISIC_{24306 + i:07d}"
        lines.append(f"{lesion},{image_id},{dx},histo,50.0,male,back,{source}")
        if i != skip_image:
            part = "HAM10000_images_part_1" if i % 2 else "HAM10000_images_part_2"
            save_image(root / part / f"{image_id}.jpg", (10 * i, 100, 200 - 10 * i), (60 + i, 45 + i))
    root.mkdir(parents=True, exist_ok=True)
    (root / "HAM10000_metadata.csv").write_text("\n".join(lines) + "\n")
    return root


def dump(path: Path, obj: dict) -> None:
    with path.open("wb") as f:
        pickle.dump(obj, f, protocol=2)


def write_cifar(
    folder: Path, batches: dict[str, int], label_key: str, n_classes: int, every_class: bool = False
) -> dict:
    """Write CIFAR python batches of random images; return {batch: (uint8 (N,3,32,32), labels)}. Labels are random,
    or with `every_class` 0, 1, 2, ... counted on across the batches (enough images then hold every class: loaders
    that check the classes refuse a class without a training sample)."""
    folder.mkdir(parents=True)
    written = {}
    count = 0
    for name, n in batches.items():
        x = RNG.integers(0, 256, (n, 3, 32, 32), dtype=np.uint8)
        y = [(count + i) % n_classes for i in range(n)] if every_class else RNG.integers(0, n_classes, n).tolist()
        count += n
        dump(folder / name, {"batch_label": name, "data": x.reshape(n, 3072), label_key: y, "filenames": []})
        written[name] = (x, y)
    return written


def assert_valid_partition(parts: list[np.ndarray], n: int, num_clients: int) -> None:
    assert len(parts) == num_clients
    for p in parts:
        assert p.dtype == np.int64 and p.ndim == 1
        assert np.all(np.diff(p) > 0), "each part sorted and without duplicates"
    everything = np.concatenate(parts)
    assert len(everything) == n, "parts are disjoint"
    np.testing.assert_array_equal(np.sort(everything), np.arange(n))


def write_idx(folder, prefix: str, images: np.ndarray, labels: np.ndarray) -> None:
    """The idx files torchvision's MNIST reads (uncompressed): magic, sizes (big-endian), then the bytes."""
    folder.mkdir(parents=True, exist_ok=True)
    n, h, w = images.shape
    (folder / f"{prefix}-images-idx3-ubyte").write_bytes(struct.pack(">IIII", 2051, n, h, w) + images.tobytes())
    (folder / f"{prefix}-labels-idx1-ubyte").write_bytes(struct.pack(">II", 2049, n) + labels.tobytes())


def write_svhn(root: Path, split: str, images: np.ndarray, labels: np.ndarray) -> None:
    """SVHN's `<split>_32x32.mat`: X is (H, W, C, N) uint8, y is (N, 1) with 10 meaning the digit 0."""
    from scipy.io import savemat

    root.mkdir(parents=True, exist_ok=True)
    savemat(root / f"{split}_32x32.mat", {"X": images.transpose(2, 3, 1, 0), "y": labels.reshape(-1, 1)})


def write_usps(path: Path, images: np.ndarray, labels: np.ndarray) -> None:
    """USPS's bzip2'd libsvm lines: `label 1:v ... 256:v`, labels 1..10, pixels in [-1, 1] (images in 0..255)."""
    import bz2

    path.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for image, label in zip(images, labels):
        values = image.ravel() / 255.0 * 2 - 1
        lines.append(f"{label} " + " ".join(f"{i + 1}:{v:.6f}" for i, v in enumerate(values)))
    path.write_bytes(bz2.compress(("\n".join(lines) + "\n").encode()))


# Data a run must refuse, as files in the repository: the bad-inputs table (tests/cli/test_bad_inputs.py) runs whole
# commands that may write nothing, so its cases cannot make their files. write_bad_data makes them again (the
# .npz files' zip headers hold the time they were written, so their arrays, not their bytes, are compared).
BAD_DATA = Path(__file__).resolve().parent / "bad_data"


def write_bad_data(folder: Path) -> dict[str, Path]:
    """ambiguous.npz: (N, 3, 3, 3) images, (N, C, H, W) or (N, H, W, C); test_only_class.npz: label 2 in y_test
    only; one_class.npz: every label 0; one_class_folder/: an image_folder root with one class folder."""
    folder.mkdir(parents=True, exist_ok=True)
    square = np.arange(4 * 5 * 5, dtype=np.uint8).reshape(4, 5, 5)
    arrays = {
        "ambiguous.npz": (np.arange(4 * 27, dtype=np.uint8).reshape(4, 3, 3, 3), [0, 1, 0, 1], [1, 0]),
        "test_only_class.npz": (square, [0, 1, 0, 1], [2, 0]),
        "one_class.npz": (square, [0, 0, 0, 0], [0, 0]),
    }
    written = {}
    for name, (x, y_train, y_test) in arrays.items():
        written[name] = folder / name
        np.savez(written[name], x_train=x, y_train=np.array(y_train), x_test=x[:2], y_test=np.array(y_test))
    root = folder / "one_class_folder"
    for split, count in (("train", 2), ("test", 1)):
        for i in range(count):
            save_image(root / split / "cat" / f"{i}.png", (40 * i, 80, 120), (4, 4), "L")
    written["one_class_folder"] = root
    return written


# Archives as the datasets' sites serve them, for the download tests (a local HTTP server serves their bytes).


def cifar10_archive(folder: Path) -> tuple[Path, dict]:
    """A tiny `cifar-10-python.tar.gz` in the official layout: cifar-10-batches-py/ holding data_batch_1..5 (4
    images each), test_batch (3) and batches.meta; labels 0, 1, 2, ... so every class has a training sample.
    Returns the archive and {batch: (uint8 (N, 3, 32, 32), labels)}."""
    staging = folder / "staging"
    written = write_cifar(
        staging / "cifar-10-batches-py",
        {f"data_batch_{i}": 4 for i in range(1, 6)} | {"test_batch": 3},
        "labels",
        10,
        every_class=True,
    )
    dump(staging / "cifar-10-batches-py" / "batches.meta", {"label_names": [f"c{i}" for i in range(10)]})
    archive = folder / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(staging / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    return archive, written


def gzipped_idx(folder: Path, prefix: str, images: np.ndarray, labels: np.ndarray) -> dict[str, bytes]:
    """MNIST's served files for one split: {"<prefix>-images-idx3-ubyte.gz": bytes, "<prefix>-labels-...": bytes}."""
    write_idx(folder, prefix, images, labels)
    names = (f"{prefix}-images-idx3-ubyte", f"{prefix}-labels-idx1-ubyte")
    return {f"{name}.gz": gzip.compress((folder / name).read_bytes(), mtime=0) for name in names}


# ---- Hugging Face tables and LEAF's JSON ------------------------------------------------------------------------


def png(mode: str, size: tuple[int, int], value: int | tuple[int, ...]) -> bytes:
    """A solid PNG image of `mode` (L, RGB, RGBA, P, I;16, ...), `size` (width, height), every pixel `value`."""
    out = io.BytesIO()
    Image.new(mode, size, value).save(out, format="PNG")
    return out.getvalue()


def write_femnist_parquet(path: Path, rows: list[tuple[int, int, str]], size: tuple[int, int] = (2, 2)) -> Path:
    """The hub's FEMNIST schema in a parquet file: image (PNG bytes, an Image feature), character (int),
    writer_id (string); one row per (gray value of the solid image, character, writer)."""
    import datasets

    datasets.disable_progress_bars()
    features = datasets.Features(
        {"image": datasets.Image(), "character": datasets.Value("int64"), "writer_id": datasets.Value("string")}
    )
    table = {
        "image": [{"bytes": png("L", size, value), "path": None} for value, _, _ in rows],
        "character": [character for _, character, _ in rows],
        "writer_id": [writer for _, _, writer in rows],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    datasets.Dataset.from_dict(table, features=features).to_parquet(str(path))
    return path


def write_leaf(folder: Path, users: dict[str, tuple[list, list]], file: str = "all_data.json") -> Path:
    """One LEAF JSON file under `folder`: {users, num_samples, user_data: {user: {x, y}}}, as LEAF writes it (x rows
    of pixels and integer y: FEMNIST; x strings and y next characters: Shakespeare)."""
    folder.mkdir(parents=True, exist_ok=True)
    data = {
        "users": list(users),
        "num_samples": [len(y) for _, y in users.values()],
        "user_data": {user: {"x": x, "y": y} for user, (x, y) in users.items()},
    }
    (folder / file).write_text(json.dumps(data))
    return folder / file


def next_characters(text: str, length: int) -> tuple[list[str], list[str]]:
    """Shakespeare's samples of `text` as LEAF's preprocessing makes them: every window of `length` characters
    (x) and the character after it (y)."""
    starts = range(len(text) - length)
    return [text[i : i + length] for i in starts], [text[i + length] for i in starts]
