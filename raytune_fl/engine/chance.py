"""Chance level: when a run's final accuracy says its model learned nothing (the `collapsed` status).

A model that predicts one class scores that class's share of the evaluated split; one that guesses uniformly scores
about 1/K. A run is *collapsed* when its final accuracy on an evaluated split is not above

    bound = b + 2 * sqrt(b * (1 - b) / n),   b = max(1/K, the split's majority-class rate),

n the split's size: two binomial standard errors above the better of the two trivial predictors, so an untrained
model (a constant prediction, or a near-uniform guess) falls under it at any n. Standard library only: the engine
computes the bound from its labels once (engine/evaluation.py: `val_chance`, `test_chance`) and flags each evaluated
round (`collapsed`: an evaluated split at or under its bound); the tracker, the study and the console read the last
round's flag (tracking/records.py's `ended_status`), the report only the numbers.

A method whose clients use models of their own is judged on those (`personal_val_acc`): its global model may
legitimately stay near chance (pFedMe's w, FedBABU's never-trained head). A model per client that learned nothing
predicts its client's majority class at best, so that bound is the pooled per-client trivial rate (`pooled_bound`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable

CHANCE_Z = 2.0  # standard errors above the trivial rate: about a one-sided 97.7 % margin on one split


def trivial_rate(labels: Iterable[int], classes: int) -> float:
    """max(1/K, the majority class's share of `labels`): what a model that learned nothing can score."""
    counts = Counter(int(label) for label in labels)
    total = sum(counts.values())
    majority = max(counts.values()) / total if total else 0.0
    return max(1.0 / classes, majority)


def chance_bound(rate: float, n: int, z: float = CHANCE_Z) -> float:
    """`rate` plus `z` binomial standard errors at `n` evaluated samples; NaN without samples."""
    if n <= 0 or math.isnan(rate):
        return math.nan
    return rate + z * math.sqrt(rate * (1.0 - rate) / n)


def split_bound(labels: Iterable[int], classes: int, z: float = CHANCE_Z) -> float:
    """The chance bound of an evaluated split from its labels (`trivial_rate` + z standard errors)."""
    labels = list(labels)
    return chance_bound(trivial_rate(labels, classes), len(labels), z) if labels else math.nan


def pooled_bound(labels_per_client: Iterable[Iterable[int]], classes: int, z: float = CHANCE_Z) -> float:
    """The chance bound of one model per client, each scored on its own labels: the clients' trivial rates weighted
    by their samples, + z standard errors over all of them; NaN without samples."""
    sizes, rates = [], []
    for labels in labels_per_client:
        labels = list(labels)
        if labels:
            sizes.append(len(labels))
            rates.append(trivial_rate(labels, classes))
    total = sum(sizes)
    return chance_bound(sum(n * r for n, r in zip(sizes, rates)) / total, total, z) if total else math.nan


def at_chance(accuracy: float, bound: float) -> bool:
    """A final accuracy not above its split's bound; NaN on either side (no such split) is not a verdict."""
    return not (math.isnan(accuracy) or math.isnan(bound)) and accuracy <= bound


def collapsed(scores: Iterable[tuple[float, float]]) -> bool:
    """Whether any evaluated split's (accuracy, bound) is at chance: a split absent (NaN) never counts."""
    return any(at_chance(accuracy, bound) for accuracy, bound in scores)
