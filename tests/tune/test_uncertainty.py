"""tune/uncertainty.py: the binomial standard error of a validation accuracy, and which variants a single-trial
ranking cannot tell apart; summarise() carries the selected trial's standard error to the parent run."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from raytune_fl.config import ExperimentConfig, TuneSettings, VariantTrials
from raytune_fl.tune.uncertainty import accuracy_se, has_binomial_se, within_noise

FEDAVG = VariantTrials(ExperimentConfig(rounds=3), "fedavg", {})  # a study of 3 rounds, selecting on val_acc


def test_the_standard_error_is_sqrt_p_1_minus_p_over_n():
    assert accuracy_se(0.7, 400) == pytest.approx(0.022913, abs=1e-6)  # sqrt(0.21 / 400)
    assert accuracy_se(0.5, 100) == pytest.approx(0.05)  # sqrt(0.25 / 100): the largest at a given n
    assert accuracy_se(1.0, 400) == 0.0 and accuracy_se(0.0, 400) == 0.0


@pytest.mark.parametrize("accuracy,samples", [(0.7, 0), (0.7, None), (1.2, 400), (-0.1, 400), (math.nan, 400)])
def test_no_standard_error_without_a_proportion_or_samples(accuracy, samples):
    assert accuracy_se(accuracy, samples) is None


def test_only_a_validation_accuracy_has_a_binomial_standard_error():
    assert has_binomial_se("val_acc") and has_binomial_se("personal_val_acc")
    assert not has_binomial_se("val_loss") and not has_binomial_se("test_acc")


def test_variants_within_two_standard_errors_of_the_best_are_flagged():
    # best a = 0.72 (SE 0.02245 at n = 400): b = 0.68 (SE 0.02332) differs by 0.04 < 2 * sqrt(0.02245^2 + 0.02332^2)
    # = 0.0647; c = 0.60 (SE 0.02449) differs by 0.12 > 2 * sqrt(0.02245^2 + 0.02449^2) = 0.0665
    scores = {v: (p, accuracy_se(p, 400)) for v, p in {"c": 0.60, "a": 0.72, "b": 0.68}.items()}
    assert within_noise(scores) == ("a", ["b"])
    assert within_noise(scores, z=5.0) == ("a", ["c", "b"])  # 0.12 < 5 * 0.0332: in the input's order
    assert within_noise({"a": (0.72, 0.01), "b": (0.60, 0.01)}) == ("a", [])  # 0.12 > 2 * 0.01414


def test_the_rule_at_its_edges():
    assert within_noise({"a": (0.5, 0.05)}) is None  # nothing to rank
    assert within_noise({"a": (1.0, 0.0), "b": (1.0, 0.0)}) == ("a", ["b"])  # a tie is noise even at SE 0
    # exactly at the bound (0.5 = 2 * sqrt(0^2 + 0.25^2), exact in binary) counts as within
    assert within_noise({"a": (0.75, 0.0), "b": (0.25, 0.25)}) == ("a", ["b"])
    assert within_noise({"a": (0.3, 0.01), "b": (0.5, 0.01)}, maximize=False) == ("a", [])  # a loss: lower wins


def _result(round_: int, val_acc: float) -> SimpleNamespace:
    return SimpleNamespace(error=None, metrics={"round": round_, "val_acc": val_acc, "test_acc": 0.5}, config={})


def test_summarise_adds_the_selected_trials_standard_error():
    from raytune_fl.tune.outcome import summarise

    results = [_result(3, 0.6), _result(3, 0.7), _result(1, 0.9)]  # the last stopped early: not selected
    outcome, best = summarise(results, "fedavg", FEDAVG, TuneSettings(), val_samples=400)
    assert best is results[1]
    assert outcome.best_metrics["val_acc_se"] == pytest.approx(0.022913, abs=1e-6)
    outcome, _ = summarise(results, "fedavg", FEDAVG, TuneSettings())  # size unknown: none
    assert "val_acc_se" not in outcome.best_metrics
