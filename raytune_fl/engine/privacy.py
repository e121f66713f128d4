"""Differential privacy in the round driver: client-level DP-FedAvg's aggregation (central) and the epsilon ledger of
both mechanisms (docs/explanation/privacy.md).

Central: the round's clients are a Poisson sample (engine/synchronous.py), each update is clipped, the noisy sum is
divided by the expected cohort (raytune_fl.privacy.central), and the method's server rule runs on that one private
mean as if a single client had sent it: what a method whose `central_privacy` is "" reads (the conformance suite
checks it). Every round adds noise, also one that drew nobody: the accountant counts every round.

Local: each client runs DP-SGD (engine/dp_sgd.py); the ledger adds up each client's steps, and a round reports the
largest epsilon any client has spent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from raytune_fl.config import ExperimentConfig, PrivacyConfig
from raytune_fl.metrics import DP_CLIPPED_FRACTION, DP_NOISE_MULTIPLIER, EPSILON
from raytune_fl.privacy.accountant import GaussianSteps, epsilon, noise_for_epsilon
from raytune_fl.privacy.central import private_mean
from raytune_fl.privacy.local import local_plan
from raytune_fl.types import ClientUpdate, Weights, is_float_entry

NOISE_STREAM = 13  # the server's noise draws: a stream apart from sampling (7) and training


def central_noise(privacy: PrivacyConfig, participation: float, rounds: int) -> float:
    """The noise multiplier of a central run: the given one, 1.0 unset, or the one that spends exactly
    target_epsilon over `rounds` Poisson-sampled rounds at rate `participation`."""
    if privacy.target_epsilon is None:
        return 1.0 if privacy.noise_multiplier is None else privacy.noise_multiplier
    return _noise_for(privacy.target_epsilon, participation, rounds, privacy.delta, privacy.accountant)


def local_noise(privacy: PrivacyConfig, sizes: Sequence[int], batch_size: int, local_epochs: int, rounds: int) -> float:
    """The noise multiplier of a local run: the given one, 1.0 unset, or the smallest that keeps every client within
    target_epsilon if it trained in every round (its local plan's steps each time)."""
    if privacy.target_epsilon is None:
        return 1.0 if privacy.noise_multiplier is None else privacy.noise_multiplier
    plans = {local_plan(n, batch_size, local_epochs) for n in sizes if n > 0}
    return max(
        _noise_for(privacy.target_epsilon, p.sample_rate, p.steps_per_round * rounds, privacy.delta, privacy.accountant)
        for p in plans
    )


@lru_cache(maxsize=256)
def _noise_for(target: float, rate: float, steps: int, delta: float, accountant: str) -> float:
    return noise_for_epsilon(target, rate, steps, delta, accountant)


def mechanism_noise(experiment: ExperimentConfig, sizes: Sequence[int]) -> float:
    """The noise multiplier `experiment` runs with (it has a privacy section), its clients of `sizes` samples."""
    privacy = experiment.privacy
    assert privacy is not None
    if privacy.mechanism == "central":
        return central_noise(privacy, experiment.participation, experiment.rounds)
    return local_noise(privacy, sizes, experiment.batch_size, experiment.local_epochs, experiment.rounds)


class CentralPrivacy:
    """Client-level DP-FedAvg's server: the private mean, the method's rule on it, and epsilon by rounds run.
    No state of its own: noise and sampling are keyed by (seed, round), epsilon by the round's index."""

    def __init__(self, experiment: ExperimentConfig, noise: float, num_clients: int) -> None:
        privacy = experiment.privacy
        assert privacy is not None and privacy.mechanism == "central"
        self.privacy, self.noise, self.seed = privacy, noise, experiment.seed
        self.rate = experiment.participation
        self.expected_clients = self.rate * num_clients
        self.last_clipped = float("nan")

    def aggregate(self, method: Any, weights: Weights, updates: Sequence[ClientUpdate], round_index: int) -> Weights:
        """`method`'s server rule on the private mean of `updates` (none: noise alone), BatchNorm running variances
        kept at or above 0 (post-processing: no privacy cost)."""
        template = {key: value for key, value in weights.items() if is_float_entry(value)}
        rng = np.random.default_rng([self.seed, round_index, NOISE_STREAM])
        deltas = [update.delta for update in sorted(updates, key=lambda u: u.client_id)]
        mean, stats = private_mean(template, deltas, self.privacy.clip_norm, self.noise, self.expected_clients, rng)
        self.last_clipped = stats.clipped / len(deltas) if deltas else float("nan")
        # the server hears one client: the private mean, with no samples, steps, buffers or extras of anyone's
        private = ClientUpdate(client_id=0, num_samples=1, num_steps=1, delta=mean, buffers={}, metrics={})
        new = method.aggregate(weights, [private])
        return {
            key: np.maximum(value, 0) if key.endswith("running_var") and is_float_entry(value) else value
            for key, value in new.items()
        }

    def round_metrics(self, round_index: int, updates: Sequence[ClientUpdate]) -> dict[str, float]:
        spent = epsilon(
            [GaussianSteps(self.noise, self.rate, round_index)], self.privacy.delta, self.privacy.accountant
        )
        metrics = {EPSILON: spent, DP_NOISE_MULTIPLIER: self.noise}
        if updates:
            metrics[DP_CLIPPED_FRACTION] = self.last_clipped
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        pass


class LocalLedger:
    """Local DP-SGD's accountant on the server: each client's steps so far (checkpointed), its sampling rate from its
    training size, and the largest epsilon any client has spent."""

    def __init__(self, experiment: ExperimentConfig, noise: float, sizes: Sequence[int]) -> None:
        privacy = experiment.privacy
        assert privacy is not None and privacy.mechanism == "local"
        self.privacy, self.noise = privacy, noise
        self.rates = [local_plan(n, experiment.batch_size, experiment.local_epochs).sample_rate if n else 0.0
                      for n in sizes]  # fmt: skip
        self.steps: dict[int, int] = {}
        self.spent: dict[int, float] = {}

    def record(self, updates: Sequence[ClientUpdate]) -> None:
        for update in updates:
            steps = self.steps.get(update.client_id, 0) + update.num_steps
            self.steps[update.client_id] = steps
            event = GaussianSteps(self.noise, self.rates[update.client_id], steps)
            self.spent[update.client_id] = epsilon([event], self.privacy.delta, self.privacy.accountant)

    def round_metrics(self, round_index: int, updates: Sequence[ClientUpdate]) -> dict[str, float]:
        return {EPSILON: max(self.spent.values(), default=0.0), DP_NOISE_MULTIPLIER: self.noise}

    def state_dict(self) -> dict[str, Any]:
        # clients as strings: the checkpoint's dicts are keyed by text
        return {"steps": {str(client): steps for client, steps in self.steps.items()}}  # not-a-metric

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.steps, self.spent = {}, {}
        for client, steps in state["steps"].items():  # not-a-metric
            self.steps[int(client)] = int(steps)
            event = GaussianSteps(self.noise, self.rates[int(client)], int(steps))
            self.spent[int(client)] = epsilon([event], self.privacy.delta, self.privacy.accountant)
