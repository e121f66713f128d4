"""``dataset: hf`` (raytune_fl/data/hf.py) on tiny files in the real formats ``datasets`` reads: parquet (the hub's
FEMNIST schema), a save_to_disk folder, CSV with image paths, an imagefolder tree; images of every mode; labels
of every kind; each refusal's message; and a federation built and trained on a parquet file."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from raytune_fl.config import ConfigError, ExperimentConfig, parse_space
from raytune_fl.data import load_dataset
from raytune_fl.data.datasets import standardise
from raytune_fl.data.hf import decode_image, is_hub_id
from tests.support import tiny_space
from tests.support.data_files import png, save_image, write_femnist_parquet

datasets = pytest.importorskip("datasets")  # the [data] extra

datasets.disable_progress_bars()

# (gray value, character, writer): the train split 0/255 images, so standardised pixels are -1 and +1
FEMNIST_TRAIN = [
    (0, 0, "f0001"),
    (255, 1, "f0001"),
    (0, 2, "f0002"),
    (255, 0, "f0002"),
    (0, 1, "f0003"),
    (255, 2, "f0003"),
]
FEMNIST_TEST = [(255, 1, "f0001"), (0, 2, "f0003")]


def femnist_folder(tmp: Path) -> str:
    """The hub's layout of a dataset's parquet files: the split in each file's name."""
    write_femnist_parquet(tmp / "femnist" / "train-00000-of-00001.parquet", FEMNIST_TRAIN)
    write_femnist_parquet(tmp / "femnist" / "test-00000-of-00001.parquet", FEMNIST_TEST)
    return str(tmp / "femnist")


def table(rows: dict, features: dict | None = None) -> datasets.Dataset:
    return datasets.Dataset.from_dict(rows, features=datasets.Features(features) if features else None)


def images(*values: bytes) -> list[dict]:
    return [{"bytes": value, "path": None} for value in values]


def load(path, **options):
    return load_dataset("hf", options={"path": str(path), **options})


# ---- FEMNIST's schema: image bytes, an int label, writer_id -----------------------------------------------------


def test_a_femnist_parquet_folder_loads_with_its_writers_aligned_to_the_samples(tmp_path):
    ds = load(femnist_folder(tmp_path), label="character", columns=["writer_id"])
    assert ds.x_train.shape == (6, 1, 2, 2) and ds.x_test.shape == (2, 1, 2, 2) and ds.x_train.dtype == np.float32
    signs = [-1.0, 1.0, -1.0, 1.0, -1.0, 1.0]  # 0 and 255: mean 0.5, std 0.5 of the [0, 1] pixels
    assert np.array_equal(ds.x_train[:, 0, 0, 0], signs) and np.array_equal(ds.x_test[:, 0, 1, 1], [1.0, -1.0])
    assert ds.y_train.tolist() == [0, 1, 2, 0, 1, 2] and ds.y_test.tolist() == [1, 2] and ds.num_classes == 3
    assert ds.columns_train["writer_id"].tolist() == ["f0001", "f0001", "f0002", "f0002", "f0003", "f0003"]
    assert ds.class_names == () and ds.name == "femnist"


def test_one_parquet_file_is_its_train_split_and_test_fraction_carves_a_seeded_test_set(tmp_path):
    path = write_femnist_parquet(tmp_path / "femnist.parquet", FEMNIST_TRAIN)
    with pytest.raises(ValueError) as error:
        load(path, label="character")
    assert str(error.value) == (
        f"hf: {path}: no split 'test' (dataset_options.test_split); the data has: train; or set "
        "dataset_options.test_fraction to carve a test set from train_split"
    )
    ds = load(path, label="character", columns=["writer_id"], test_fraction=0.34)  # round(6 x 0.34) = 2 test rows
    order = np.random.default_rng(0).permutation(6)  # split_seed 0
    train, test = sorted(order[2:]), sorted(order[:2])
    assert ds.y_train.tolist() == [FEMNIST_TRAIN[i][1] for i in train]
    assert ds.y_test.tolist() == [FEMNIST_TRAIN[i][1] for i in test]
    assert ds.columns_train["writer_id"].tolist() == [FEMNIST_TRAIN[i][2] for i in train]


# ---- images: every mode, one channel count, one size ------------------------------------------------------------


def palette_png() -> bytes:
    image = Image.new("P", (2, 1), 1)
    image.putpalette([0, 0, 0, 200, 100, 50])  # index 1: (200, 100, 50)
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


@pytest.mark.parametrize(
    ("encoded", "pixels"),
    [
        (png("L", (2, 1), 100), [[100, 100]]),
        (png("1", (2, 1), 1), [[255, 255]]),
        (png("LA", (2, 1), (100, 7)), [[100, 100]]),  # alpha dropped
        (png("I;16", (2, 1), 65535), [[255, 255]]),  # 16 bits scaled: 65535 -> 255
        (png("I;16", (2, 1), 32896), [[128, 128]]),  # (32896 x 255 + 32767) // 65535 = 128
        (png("RGB", (2, 1), (1, 2, 3)), [[[1, 2, 3], [1, 2, 3]]]),
        (png("RGBA", (2, 1), (10, 20, 30, 128)), [[[10, 20, 30], [10, 20, 30]]]),
        (palette_png(), [[[200, 100, 50], [200, 100, 50]]]),
    ],
)
def test_an_image_of_any_mode_decodes_to_8_bit_gray_or_rgb(encoded, pixels):
    assert decode_image(encoded, Path("."), None).tolist() == pixels
    assert decode_image({"bytes": encoded, "path": None}, Path("."), None).tolist() == pixels


def test_grayscale_modes_stay_one_channel_and_any_colour_image_makes_every_image_rgb(tmp_path):
    gray = [png("L", (2, 2), 0), png("1", (2, 2), 1), png("I;16", (2, 2), 0), png("LA", (2, 2), (255, 0))]
    rows = {"image": images(*gray), "label": [0, 1, 0, 1]}
    features = {"image": datasets.Image(), "label": datasets.Value("int64")}
    table(rows, features).to_parquet(str(tmp_path / "gray.parquet"))
    one = load(tmp_path / "gray.parquet", test_fraction=0.25)
    assert one.in_channels == 1
    colour = [png("RGBA", (2, 2), (255, 0, 0, 9)), *gray[:3]]  # red, then gray 0, 255, 0
    table({"image": images(*colour), "label": [0, 1, 0, 1]}, features).to_parquet(str(tmp_path / "c.parquet"))
    three = load(tmp_path / "c.parquet", test_fraction=0.25)
    assert three.in_channels == 3
    order = np.random.default_rng(0).permutation(4)
    pixels = np.array([[255, 0, 0], [0, 0, 0], [255, 255, 255], [0, 0, 0]], np.uint8)  # per row: its RGB
    train = pixels[np.sort(order[1:])][:, :, None, None].repeat(2, 2).repeat(2, 3)
    test = pixels[np.sort(order[:1])][:, :, None, None].repeat(2, 2).repeat(2, 3)
    expected_train, expected_test = standardise(train, test)
    assert np.allclose(three.x_train, expected_train) and np.allclose(three.x_test, expected_test)


def test_images_of_several_sizes_are_refused_naming_the_column_until_image_size_resizes_them(tmp_path):
    sizes = [(4, 4), (3, 2), (4, 4), (4, 4)]
    rows = {"img": images(*(png("L", size, 10 * i) for i, size in enumerate(sizes))), "label": [0, 1, 0, 1]}
    features = {"img": datasets.Image(), "label": datasets.Value("int64")}
    table(rows, features).save_to_disk(str(tmp_path / "saved"))
    with pytest.raises(ValueError) as error:
        load(tmp_path / "saved", image="img", test_fraction=0.25)
    assert str(error.value) == (
        f"hf: {tmp_path / 'saved'}: the train split's images (column 'img') differ in size (H x W: 2x3, 4x4); set "
        "dataset_options.image_size to resize them"
    )
    ds = load(tmp_path / "saved", image="img", test_fraction=0.25, image_size=[2, 3])
    assert ds.x_train.shape[1:] == (1, 2, 3) and ds.x_test.shape[1:] == (1, 2, 3)


# ---- sources: save_to_disk, CSV of paths, an imagefolder tree ---------------------------------------------------


def test_a_saved_dataset_dict_reads_its_classlabel_names(tmp_path):
    features = {"image": datasets.Image(), "label": datasets.ClassLabel(names=["cat", "dog", "eel"])}
    train = table(
        {"image": images(*(png("RGB", (3, 3), (v, v, v)) for v in (0, 50, 100))), "label": [2, 0, 1]}, features
    )
    test = table({"image": images(png("RGB", (3, 3), (9, 9, 9))), "label": [1]}, features)
    datasets.DatasetDict({"training": train, "eval": test}).save_to_disk(str(tmp_path / "dd"))
    ds = load(tmp_path / "dd", train_split="training", test_split="eval")
    assert ds.class_names == ("cat", "dog", "eel") and ds.num_classes == 3
    assert ds.y_train.tolist() == [2, 0, 1] and ds.y_test.tolist() == [1]
    assert ds.in_channels == 3  # RGB images stay RGB though gray-valued: the mode decides, not the values


def test_a_csv_of_relative_image_paths_and_string_labels_numbers_the_labels_in_sorted_order(tmp_path):
    for name, value in (("a.png", 0), ("b.png", 255), ("c.png", 0), ("d.png", 255)):
        save_image(tmp_path / "pics" / name, (value, value, value), (2, 2), mode="L")
    (tmp_path / "train.csv").write_text("file,species\npics/a.png,zebra\npics/b.png,ant\npics/c.png,moth\n")
    (tmp_path / "test.csv").write_text("file,species\npics/d.png,moth\n")
    ds = load(tmp_path, image="file", label="species")
    assert ds.class_names == ("ant", "moth", "zebra")
    assert ds.y_train.tolist() == [2, 0, 1] and ds.y_test.tolist() == [1]
    assert ds.x_train[:, 0, 0, 0].tolist() == pytest.approx([-0.7071068, 1.4142135, -0.7071068])  # 0, 1, 0: std √2/3


def test_an_imagefolder_tree_is_read_by_datasets_imagefolder_builder(tmp_path):
    for split, count in (("train", 2), ("test", 1)):
        for label, value in (("cat", 40), ("dog", 200)):
            for i in range(count):
                save_image(tmp_path / "tree" / split / label / f"{i}.png", (value, 0, 0), (3, 2))
    ds = load(tmp_path / "tree")
    assert ds.class_names == ("cat", "dog") and sorted(ds.y_train.tolist()) == [0, 0, 1, 1]
    assert ds.x_train.shape == (4, 3, 2, 3) and sorted(ds.y_test.tolist()) == [0, 1]
    red = ds.x_train[:, 0, 0, 0]
    assert np.array_equal(red > 0, ds.y_train == 1)  # dog's red 200 above the mean, cat's 40 below


# ---- refusals ---------------------------------------------------------------------------------------------------


def test_a_hub_id_without_download_is_refused_before_anything_loads(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    space = tiny_space("hub", dataset="hf", dataset_options={"path": "flwrlabs/femnist", "label": "character"})
    with pytest.raises(ConfigError) as error:
        parse_space(space)
    first = str(error.value).splitlines()[0]
    assert "base.dataset_options: path 'flwrlabs/femnist' is not a local file or folder" in first
    assert "dataset_options.download: true (into <base.root>/huggingface)" in first
    options = {"path": "flwrlabs/femnist", "download": True}
    with pytest.raises(FileNotFoundError, match="download: true needs base.root, the folder the hub's files are"):
        load_dataset("hf", options=options)


@pytest.mark.parametrize(
    ("path", "hub"),
    [
        ("flwrlabs/femnist", True),
        ("mnist", True),
        ("./mnist", False),
        ("/data/mnist", False),
        ("data.parquet", False),
        ("a/b/c", False),
        ("~/femnist", False),
    ],  # fmt: skip
)
def test_a_path_is_a_hub_id_only_where_it_is_not_local_and_looks_like_one(tmp_path, monkeypatch, path, hub):
    monkeypatch.chdir(tmp_path)
    assert is_hub_id(path) is hub
    (tmp_path / "mnist").mkdir()
    assert not is_hub_id("mnist")  # a local folder of that name wins


# ---- the hub's flwrlabs/shakespeare schema: x (80 characters as a string), y (the next one), character_id ------


def shakespeare_parquet(tmp: Path) -> Path:
    """One parquet file of the hub's Shakespeare schema (its only split is train)."""
    rows = {"x": ["To b", "o be", "A!?}", "be o"], "y": ["e", " ", "\n", "r"], "character_id": ["R", "R", "J", "R"]}
    path = tmp / "shakespeare.parquet"
    table(rows).to_parquet(str(path))
    return path


def test_the_hub_shakespeare_schema_reads_as_leafs_character_ids_with_its_speakers(tmp_path):
    path = shakespeare_parquet(tmp_path)
    ds = load(path, text="x", label="y", columns=["character_id"], test_fraction=0.25)
    # test_fraction 0.25 of 4 rows: a seeded draw puts one row in test; ids by hand from LEAF's 80 characters
    ids = {"To b": [44, 67, 1, 54], "o be": [67, 1, 54, 57], "A!?}": [25, 2, 24, 79], "be o": [54, 57, 1, 67]}
    nexts = {"To b": 57, "o be": 1, "A!?}": 0, "be o": 70}
    speaker = {"To b": "R", "o be": "R", "A!?}": "J", "be o": "R"}
    rows = list(ids)
    train = [rows[i] for i in range(4) if ids[rows[i]] in ds.x_train.tolist()]
    assert ds.is_text and ds.num_classes == 80 and ds.x_train.shape == (3, 4) and ds.x_test.shape == (1, 4)
    assert ds.x_train.tolist() == [ids[r] for r in train] and ds.y_train.tolist() == [nexts[r] for r in train]
    assert ds.columns_train["character_id"].tolist() == [speaker[r] for r in train]
    [held] = set(rows) - set(train)
    assert ds.x_test.tolist() == [ids[held]] and ds.y_test.tolist() == [nexts[held]]


def test_a_vocab_of_its_own_and_a_label_that_is_not_one_character(tmp_path):
    path = tmp_path / "t.parquet"
    table({"s": ["ab", "ba", "aa"], "next": ["b", "a", "b"]}).to_parquet(str(path))
    ds = load(path, text="s", label="next", vocab="ab", test_fraction=0.34)
    assert (
        ds.vocab == ("a", "b")
        and ds.num_classes == 2
        and set(map(tuple, ds.x_train.tolist())) <= {(0, 1), (1, 0), (0, 0)}
    )
    table({"s": ["ab", "ba"], "next": ["b", "ab"]}).to_parquet(str(path))
    with pytest.raises(ValueError, match=r"column 'next': label 1 is 'ab', not one character \(the next character\)"):
        load(path, text="s", label="next", vocab="ab", test_fraction=0.5)
    with pytest.raises(ValueError, match=r"^dataset_options.vocab: must hold at least 2 characters, each once"):
        load(path, text="s", vocab="aa")


def test_test_fraction_beside_an_explicit_test_split_is_refused(tmp_path):
    with pytest.raises(ValueError, match="test_fraction carves the test set from train_split: set test_split: null"):
        load(tmp_path, test_split="test", test_fraction=0.2)


def test_a_missing_path_and_a_missing_column_name_what_was_looked_for(tmp_path):
    with pytest.raises(FileNotFoundError) as error:
        load(tmp_path / "nowhere.parquet")
    assert str(error.value) == f"hf: no such file or folder: {tmp_path / 'nowhere.parquet'} (dataset_options.path)"
    folder = femnist_folder(tmp_path)
    with pytest.raises(ValueError) as error:
        load(folder)  # label defaults to "label"
    assert str(error.value) == (
        f"hf: {folder}: the train split has no column 'label' (dataset_options.label); its columns: image, character, "
        "writer_id"
    )
    with pytest.raises(ValueError, match=r"has no column 'writer' \(dataset_options.columns\)"):
        load(folder, label="character", columns=["writer"])


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        ([1, 1, 1], ": every label is 1: one class, nothing to learn"),
        (["a", None, "b"], " (dataset_options.label) holds empty labels (None); labels are a ClassLabel, integers"),
        ([0, 1, 2.5], " must hold integer labels 0..K-1, got dtype float64"),  # y_train or y_test: the draw's
    ],
)
def test_labels_a_classifier_cannot_learn_are_refused_naming_the_column(tmp_path, labels, message):
    rows = {"image": images(*(png("L", (2, 2), v) for v in (0, 1, 2))), "label": labels}
    kind = datasets.Value("string" if "a" in labels else "float64")
    path = tmp_path / "t.parquet"
    table(rows, {"image": datasets.Image(), "label": kind}).to_parquet(str(path))
    with pytest.raises(ValueError) as error:
        load(path, test_fraction=0.4)
    assert str(error.value).startswith(f"hf: {path}: label column 'label'") and message in str(error.value)


def test_a_test_only_string_class_is_refused_by_name(tmp_path):
    features = {"image": datasets.Image(), "label": datasets.Value("string")}
    table({"image": images(png("L", (2, 2), 0), png("L", (2, 2), 9)), "label": ["ant", "bee"]}, features).to_parquet(
        str(tmp_path / "train-0.parquet")
    )
    table({"image": images(png("L", (2, 2), 0)), "label": ["cow"]}, features).to_parquet(
        str(tmp_path / "test-0.parquet")
    )
    with pytest.raises(ValueError, match=r"classes without a training sample: 2 \(cow\) \(only in y_test\)"):
        load(tmp_path)


def test_a_32_bit_image_is_refused_naming_its_row(tmp_path):
    out = io.BytesIO()
    Image.new("F", (2, 2), 0.5).save(out, format="TIFF")
    rows = {"image": images(png("L", (2, 2), 0), out.getvalue()), "label": [0, 1]}
    path = tmp_path / "f.parquet"
    table(rows, {"image": datasets.Image(), "label": datasets.Value("int64")}).to_parquet(str(path))
    with pytest.raises(ValueError) as error:
        load(path, test_fraction=0.5)
    assert str(error.value) == (
        f"hf: {path}: train split, column 'image' (dataset_options.image), row 1: mode F (32-bit pixels) has no fixed "
        "range; store 8- or 16-bit images"
    )


# ---- the engine: a federation on a parquet file -----------------------------------------------------------------


def test_an_experiment_on_a_parquet_file_builds_its_federation_and_trains_a_round(tmp_path):
    import torch

    from raytune_fl.engine.data import prepare_data
    from raytune_fl.engine.federation import Federation

    rows = [(40 * (i % 6), i % 3, f"w{i % 4}") for i in range(24)]
    path = write_femnist_parquet(tmp_path / "femnist.parquet", rows, size=(8, 8))
    experiment = ExperimentConfig.model_validate({
        "dataset": "hf",
        "dataset_options": {"path": str(path), "label": "character", "columns": ["writer_id"], "test_fraction": 0.25},
        "partition": {"kind": "iid", "clients": 2, "min_size": 4, "seed": 0},
        "rounds": 1,
        "batch_size": 4,
        "resources": {"actors": 0},
    })  # fmt: skip
    data = prepare_data(experiment)
    assert data.num_clients == 2 and sum(len(p) for p in data.client_parts) == 18  # 24 rows, 6 to the test set
    assert data.dataset.x_train.shape == (18, 1, 8, 8) and len(data.dataset.columns_train["writer_id"]) == 18
    torch.set_num_threads(1)
    rounds = []
    Federation(experiment, "fedavg", {}, data=data).run(rounds.append)
    assert len(rounds) == 1 and np.isfinite(rounds[0]["train_loss"])
