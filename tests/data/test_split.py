"""The per-client split by hand: train_val_test_split on tiny arrays (its counts, disjointness, and the split without
a test part equal to train_val_split's, bit for bit)."""

from __future__ import annotations

import numpy as np
import pytest

from raytune_fl.data import train_val_split, train_val_test_split


def test_no_test_fraction_is_the_train_validation_split_bit_for_bit():
    indices = np.arange(100, 120)
    for seed in (0, 7, 123):
        train, val, test = train_val_test_split(indices, 0.1, 0.0, seed, test_seed=99)
        old_train, old_val = train_val_split(indices, 0.1, seed)
        assert np.array_equal(train, old_train) and np.array_equal(val, old_val)
        assert test.size == 0 and test.dtype == indices.dtype


def test_the_test_part_comes_out_of_training_and_leaves_validation_as_it_was():
    indices = np.arange(20) * 3  # 20 samples: validation round(0.1 x 20) = 2, test round(0.25 x 20) = 5
    train, val, test = train_val_test_split(indices, 0.1, 0.25, seed=4, test_seed=5)
    old_train, old_val = train_val_split(indices, 0.1, seed=4)
    assert (len(train), len(val), len(test)) == (13, 2, 5)
    assert np.array_equal(val, old_val)  # validation: the same samples with or without a test part
    assert set(test) <= set(old_train) and np.array_equal(np.sort(np.concatenate([train, test])), old_train)
    assert not set(train) & set(val) | set(train) & set(test) | set(val) & set(test)
    assert all(np.array_equal(part, np.sort(part)) for part in (train, val, test))
    # its own seed: the same test part for the same seeds, another for another test seed
    again = train_val_test_split(indices, 0.1, 0.25, seed=4, test_seed=5)
    assert all(np.array_equal(a, b) for a, b in zip(again, (train, val, test)))
    other = train_val_test_split(indices, 0.1, 0.25, seed=4, test_seed=6)
    assert np.array_equal(other[1], val) and not np.array_equal(other[2], test)


def test_small_shares_keep_a_test_sample_and_a_training_sample():
    # 4 samples, 0.1: round(0.4) = 0 held out, but at least 1 each (validation first, then test from the 3 left)
    train, val, test = train_val_test_split(np.arange(4), 0.1, 0.1, seed=0, test_seed=0)
    assert (len(train), len(val), len(test)) == (2, 1, 1)
    # 3 samples at 0.3 and 0.6: validation round(0.9) = 1, test round(1.8) = 2, but training keeps 1 of its 2
    train, val, test = train_val_test_split(np.arange(3), 0.3, 0.6, seed=0, test_seed=0)
    assert (len(train), len(val), len(test)) == (1, 1, 1)
    # one sample: nothing can be held out
    train, val, test = train_val_test_split(np.arange(1), 0.5, 0.4, seed=0, test_seed=0)
    assert (len(train), len(val), len(test)) == (1, 0, 0)
    with pytest.raises(ValueError, match=r"test_fraction must be in \[0, 1\), got 1.0"):
        train_val_test_split(np.arange(4), 0.1, 1.0, seed=0, test_seed=0)
