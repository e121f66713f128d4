"""tune/selection.py: which trial a study selects, and the best trial so far as trials end (the model logged ahead
is the one selected at the end whenever the order of endings does not break a tie)."""

from __future__ import annotations

import math

import pytest

from raytune_fl.tune.selection import beats, best_of, candidacy

ROUNDS = 6


def test_candidacy_reads_full_runs_and_refuses_diverged_missing_and_nan():
    assert candidacy({"round": 6, "val_acc": 0.7}, "val_acc", ROUNDS) == (True, 0.7)
    assert candidacy({"round": 2, "val_acc": 0.9}, "val_acc", ROUNDS) == (False, 0.9)  # stopped early by ASHA
    assert candidacy({"round": 3, "val_acc": 0.0, "diverged": 1}, "val_acc", ROUNDS) is None
    assert candidacy({"round": 6}, "val_acc", ROUNDS) is None
    assert candidacy({"round": 6, "val_acc": math.nan}, "val_acc", ROUNDS) is None


def test_a_full_run_beats_any_stopped_one_and_ties_keep_the_holder():
    assert beats((True, 0.5), (False, 0.9), maximize=True)
    assert not beats((False, 0.9), (True, 0.5), maximize=True)
    assert beats((True, 0.4), (True, 0.5), maximize=False)  # a loss: lower is better
    assert not beats((True, 0.5), (True, 0.5), maximize=True)
    assert beats((False, 0.1), None, maximize=True)


@pytest.mark.parametrize("maximize", [True, False])
def test_the_best_so_far_when_the_last_trial_ends_is_best_ofs_selection(maximize):
    # (round reached, value) of trials in the order they end; distinct values: no tie to break
    ended = [(6, 0.61), (2, 0.80), (6, 0.64), (4, 0.70), (6, 0.58), (6, 0.66), (2, 0.55), (6, 0.62)]
    metric = "val_acc" if maximize else "val_loss"
    held, so_far = None, None
    for index, (reached, value) in enumerate(ended):
        chosen = candidacy({"round": reached, metric: value}, metric, ROUNDS)
        if beats(chosen, held, maximize):
            held, so_far = chosen, index
    candidates = [(r >= ROUNDS, v, i) for i, (r, v) in enumerate(ended)]
    assert so_far == best_of(candidates, maximize) == (5 if maximize else 4)
