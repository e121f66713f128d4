"""``dataset: leaf`` (raytune_fl/data/leaf.py) on LEAF's JSON files as its FEMNIST scripts write them: images
checked by hand, each training sample's writer in columns_train, and every refusal's message."""

from __future__ import annotations

import json

import numpy as np
import pytest

from raytune_fl.data import load_dataset
from raytune_fl.data.leaf import WRITER
from tests.support.data_files import write_leaf

BLACK, WHITE = [0.0] * 4, [1.0] * 4  # 2x2 images, flattened as LEAF's x rows


def femnist(tmp_path):
    """Two train files (writers in file order), one test file: LEAF's data/ folder under femnist/."""
    data = tmp_path / "femnist" / "data"
    write_leaf(data / "train", {"f0001_00": ([BLACK, WHITE], [0, 1]), "f0002_01": ([BLACK], [2])}, "a_train.json")
    write_leaf(data / "train", {"f0003_02": ([WHITE, [0.0, 1.0, 1.0, 0.0]], [1, 2])}, "b_train.json")
    write_leaf(data / "test", {"f0001_00": ([WHITE], [2]), "f0003_02": ([BLACK], [0])}, "a_test.json")
    return tmp_path / "femnist"


def test_leaf_json_loads_with_one_writer_id_per_training_sample(tmp_path):
    ds = load_dataset("leaf", options={"path": str(femnist(tmp_path))})
    assert ds.name == "femnist" and ds.x_train.shape == (5, 1, 2, 2) and ds.x_test.shape == (2, 1, 2, 2)
    assert ds.y_train.tolist() == [0, 1, 2, 1, 2] and ds.y_test.tolist() == [2, 0] and ds.num_classes == 3
    writers = ["f0001_00", "f0001_00", "f0002_01", "f0003_02", "f0003_02"]
    assert WRITER == "writer_id" and ds.columns_train[WRITER].tolist() == writers
    # 20 pixels, 10 of them 1: mean 0.5, std 0.5, so 0 -> -1 and 1 -> +1
    assert ds.x_train[4, 0].tolist() == [[-1.0, 1.0], [1.0, -1.0]]
    assert np.allclose(ds.x_test[:, 0, 0, 0], [1.0, -1.0])


def test_the_data_folder_itself_and_a_non_square_row_with_image_size(tmp_path):
    data = tmp_path / "leaf" / "data"
    write_leaf(data / "train", {"u": ([[0.0] * 6, [1.0] * 6], [0, 1])})
    write_leaf(data / "test", {"u": ([[1.0] * 6], [1])})
    with pytest.raises(ValueError, match=r"x rows hold 6 values, not a square image; set dataset_options.image_size"):
        load_dataset("leaf", options={"path": str(data)})
    ds = load_dataset("leaf", options={"path": str(data), "image_size": [2, 3]})
    assert ds.x_train.shape == (2, 1, 2, 3) and ds.name == "leaf"


def test_a_folder_without_train_and_test_is_refused_naming_it(tmp_path):
    with pytest.raises(FileNotFoundError) as error:
        load_dataset("leaf", options={"path": str(tmp_path / "nowhere")})
    assert str(error.value).startswith(
        f"leaf: no train/ and test/ folders under {tmp_path / 'nowhere'} (dataset_options.path); expected train/*.json"
    )


@pytest.mark.parametrize(
    ("user_data", "message"),
    [
        ({"x": [BLACK], "y": [0, 1]}, "x must be rows of pixel values and y one label per row, got (1, 4) and (2,)"),
        ({"x": [[0.0, 2.0, 0.0, 0.0]], "y": [0]}, "x holds values outside [0, 1]; LEAF's images are pixels / 255"),
        (
            {"x": ["img_1.jpg"], "y": [0]},
            "x holds strings, so y must hold as many next characters (Shakespeare's); CelebA's",
        ),
        ({"y": [0]}, "has no x and y in user_data"),
    ],
)
def test_malformed_user_data_is_refused_naming_the_file_and_the_user(tmp_path, user_data, message):
    folder = femnist(tmp_path)
    file = folder / "data" / "train" / "c_train.json"
    file.write_text(f'{{"users": ["bad"], "num_samples": [1], "user_data": {{"bad": {json.dumps(user_data)}}}}}')
    with pytest.raises(ValueError) as error:
        load_dataset("leaf", options={"path": str(folder)})
    assert str(error.value).startswith(f"leaf: {file}: user 'bad'"), str(error.value)
    assert message in str(error.value)


def test_num_samples_that_disagree_with_the_rows_and_a_file_that_is_not_leafs_are_refused(tmp_path):
    folder = femnist(tmp_path)
    file = folder / "data" / "test" / "a_test.json"
    file.write_text('{"users": ["u"], "num_samples": [3], "user_data": {"u": {"x": [[0, 0, 0, 0]], "y": [0]}}}')
    with pytest.raises(ValueError, match=r"user 'u': num_samples says 3, x and y hold 1"):
        load_dataset("leaf", options={"path": str(folder)})
    file.write_text('{"users": []}')
    with pytest.raises(ValueError, match=r"is not a LEAF JSON file \(KeyError: 'num_samples'\)"):
        load_dataset("leaf", options={"path": str(folder)})


# ---- Shakespeare: x strings, y the next character, ids over LEAF's 80 characters ----------------------------------


def shakespeare(tmp_path):
    """Two speakers in train, one in test; ids by hand from LEAF's ALL_LETTERS ('\\n' 0, ' ' 1, '!' 2, '?' 24,
    'A'..'Z' 25..50, 'a'..'z' 53..78, '}' 79)."""
    data = tmp_path / "shakespeare" / "data"
    write_leaf(data / "train", {"ROMEO": (["To b", "o be"], ["e", " "]), "JULIET": (["A!?}"], ["\n"])})
    write_leaf(data / "test", {"ROMEO": (["be o"], ["r"])})
    return tmp_path / "shakespeare"


def test_shakespeare_json_loads_as_character_ids_with_one_writer_id_per_speaker(tmp_path):
    ds = load_dataset("leaf", options={"path": str(shakespeare(tmp_path))})
    assert ds.name == "shakespeare" and ds.is_text and len(ds.vocab) == 80 and ds.num_classes == 80
    assert ds.x_train.dtype == np.int64 and ds.x_train.tolist() == [[44, 67, 1, 54], [67, 1, 54, 57], [25, 2, 24, 79]]
    assert ds.y_train.tolist() == [57, 1, 0] and ds.x_test.tolist() == [[54, 57, 1, 67]] and ds.y_test.tolist() == [70]
    assert ds.columns_train[WRITER].tolist() == ["ROMEO", "ROMEO", "JULIET"]
    assert ds.model_inputs == (80, (1, 4))  # what a model factory receives: the vocabulary and (1, L)
    with pytest.raises(ValueError, match=r"^dataset 'shakespeare' holds text \(token ids \(3, 4\) over 80 tokens\)"):
        _ = ds.in_channels


def test_shakespeare_refuses_a_character_outside_leafs_80_and_a_label_of_two(tmp_path):
    folder = shakespeare(tmp_path)
    file = folder / "data" / "train" / "all_data.json"
    write_leaf(folder / "data" / "train", {"IAGO": (["ab#c"], ["d"])})
    with pytest.raises(ValueError) as error:
        load_dataset("leaf", options={"path": str(folder)})
    assert str(error.value) == (
        f"leaf: {file}: user 'IAGO': x: sample 0 holds '#', not one of the vocabulary's 80 characters"
    )
    write_leaf(folder / "data" / "train", {"IAGO": (["abcd"], ["de"])})
    with pytest.raises(ValueError, match=r"user 'IAGO': y: label 0 is 'de', not one character \(the next character\)"):
        load_dataset("leaf", options={"path": str(folder)})
