"""benchmarks/cross_device.py's protocol and the data every way trains on: one module that both the ways' driver
(cross_device.py) and pfl's way (pfl_way.py) import, so that neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Protocol:
    """What every way runs: the same images, users, cohort size, local training and evaluation rounds."""

    users: int = 1000
    samples_per_user: int = 50
    cohort: int = 50
    batch: int = 10
    rounds: int = 12
    eval_every: int = 10
    image: tuple[int, int, int] = (3, 32, 32)
    lr: float = 0.01  # plain local SGD: no momentum, no weight decay (pfl's benchmark trains so)
    test_samples: int = 10_000
    eval_batch: int = 500  # the engine's default eval_batch_size
    seed: int = 0
    device: str = "cpu"  # where every way trains and evaluates: cpu, or cuda (one GPU the ways take in turn)

    def evaluates(self, round_index: int) -> bool:
        """Whether the server evaluates after round `round_index` (1-based): every eval_every rounds, and the last."""
        return round_index % self.eval_every == 0 or round_index == self.rounds

    def eval_rounds(self) -> list[int]:
        return [r for r in range(1, self.rounds + 1) if self.evaluates(r)]

    def flags(self) -> list[str]:
        """The command-line flags that give this protocol to a child."""
        return [
            *("--users", str(self.users), "--samples-per-user", str(self.samples_per_user)),
            *("--cohort", str(self.cohort), "--batch", str(self.batch), "--rounds", str(self.rounds)),
            *("--eval-every", str(self.eval_every), "--image", "x".join(map(str, self.image))),
            *("--lr", repr(self.lr), "--test-samples", str(self.test_samples), "--seed", str(self.seed)),
            *("--device", self.device),
        ]


# ---- the data every way trains on -----------------------------------------------------------------------------


def iid_users(samples: int, users: int, seed: int) -> list[np.ndarray]:
    """The engine's `iid` partition (data/partition.py) written out: a seeded permutation cut into near-equal
    parts, each sorted."""
    perm = np.random.default_rng(seed).permutation(samples)
    return [np.sort(part).astype(np.int64) for part in np.array_split(perm, users)]


def cohorts(protocol: Protocol) -> list[list[int]]:
    """The users each round samples, without replacement within a round (seeded; the engine draws its own)."""
    rng = np.random.default_rng([protocol.seed, 11])
    return [sorted(rng.choice(protocol.users, protocol.cohort, replace=False).tolist()) for _ in range(protocol.rounds)]


def protocol_data(protocol: Protocol) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]:
    """x_train, y_train, x_test, y_test and each user's positions in x_train: the synthetic images the engine's
    `dataset: synthetic` builds for these settings (engine_config's), split as its `iid` partition splits them."""
    from raytune_fl.data import load_dataset

    dataset = load_dataset("synthetic", options=synthetic_options(protocol))
    users = iid_users(len(dataset.y_train), protocol.users, protocol.seed)
    return dataset.x_train, dataset.y_train, dataset.x_test, dataset.y_test, users


def synthetic_options(protocol: Protocol) -> dict[str, Any]:
    samples = protocol.users * protocol.samples_per_user
    return {"shape": list(protocol.image), "samples": samples, "test_samples": protocol.test_samples}
