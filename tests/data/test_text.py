"""Text as arrays (raytune_fl/data/text.py): LEAF's 80 characters, strings encoded by hand, the text contract's
refusals and the class rule it relaxes."""

from __future__ import annotations

import numpy as np
import pytest

from raytune_fl.data.text import LEAF_CHARACTERS, check_text, encode, encode_labels


def test_leafs_vocabulary_is_its_80_characters_in_all_letters_order():
    assert len(LEAF_CHARACTERS) == 80 and LEAF_CHARACTERS[:3] == ("\n", " ", "!") and LEAF_CHARACTERS[-1] == "}"
    assert LEAF_CHARACTERS.index("A") == 25 and LEAF_CHARACTERS.index("a") == 53


def test_strings_become_ids_and_one_character_labels_their_id():
    assert encode(["ab", "ba"], "abc", "t").tolist() == [[0, 1], [1, 0]]
    assert encode_labels(["c", "a"], "abc", "t").tolist() == [2, 0]
    with pytest.raises(ValueError, match=r"^t: the strings differ in length \(1, 2\); one length L"):
        encode(["a", "ab"], "abc", "t")
    with pytest.raises(ValueError, match=r"^t: sample 1 holds 'z', not one of the vocabulary's 3 characters"):
        encode(["ab", "az"], "abc", "t")


def test_a_token_never_a_training_label_is_allowed_but_ids_outside_the_vocabulary_are_not():
    x, y = np.array([[0, 1], [1, 2]]), np.array([0, 1])
    check_text("t", x, y, x[:1], np.array([2]), "abc")  # 2 is only in test: allowed for a fixed vocabulary
    with pytest.raises(ValueError, match=r"^t: x_test holds ids 0..3; the vocabulary's are 0..2"):
        check_text("t", x, y, np.array([[0, 3]]), np.array([0]), "abc")
    with pytest.raises(ValueError, match=r"^t: every label is 'a': one class, nothing to learn"):
        check_text("t", x, np.array([0, 0]), x, np.array([0, 0]), "abc")
    with pytest.raises(ValueError, match=r"^t: x_train sequences hold 2 tokens but x_test's 1"):
        check_text("t", x, y, np.array([[0]]), np.array([1]), "abc")
