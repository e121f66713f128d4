"""The one local loop every method trains on (engine/local.py's train_local): a size-one final batch is skipped."""

from __future__ import annotations

from tests.support.methods import train_one_round as _train


def test_a_size_one_final_batch_is_skipped():
    _, result = _train("fedavg", {}, n=33)  # 16 + 16 + 1: the single sample cannot feed BatchNorm
    assert result.steps == 2
