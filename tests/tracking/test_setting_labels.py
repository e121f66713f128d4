"""tracking/schema.py's same_setting: a study's setting tag and the setting asked for are compared with their numbers
as numbers, so that `ablate --per-setting alpha=1.0` finds the study `tune --per-setting alpha=1` tagged."""

from __future__ import annotations

import pytest

from raytune_fl.tracking.schema import same_setting


@pytest.mark.parametrize(
    ("tagged", "asked", "same"),
    [
        ("partition.alpha=1", "partition.alpha=1.0", True),
        ("partition.alpha=0.1,rounds=5", "partition.alpha=1e-1,rounds=5", True),
        ("partition.alpha=0.1", "partition.alpha=0.2", False),
        ("partition.alpha=0.1", "partition.alpha=0.1,rounds=5", False),  # another grid
        ("partition.alpha=0.1", "rounds=0.1", False),  # the same number of another field
        ("partition.kind=iid", "partition.kind=iid", True),
        (None, None, True),  # the study over the file's base
        ("partition.alpha=0.1", None, False),  # a study per setting is never the base's
        (None, "partition.alpha=0.1", False),
    ],
)
def test_settings_match_with_their_numbers_compared_as_numbers(tagged, asked, same):
    assert same_setting(tagged, asked) is same
