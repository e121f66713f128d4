"""The partitioners registry's conformance: every registered partitioner's split is disjoint, complete, sorted
and seeded. A new partitioner without a case here fails `test_every_partitioner_has_a_case`."""

from __future__ import annotations

import numpy as np
import pytest

import raytune_fl.models  # noqa: F401  (registers the models)
from raytune_fl.data.partition import PARTITIONERS, partition

# ---- partitioners: (labels, clients, seed, min_size, domains, **kind settings) -> index arrays ------------------

PARTITION_CASES: dict[str, tuple[int, dict]] = {  # kind -> (clients, its settings)
    "iid": (5, {}),
    "dirichlet": (5, {"alpha": 0.3}),
    "shards": (5, {"classes_per_client": 2}),
    "quantity_skew": (5, {"alpha": 1.0}),
    "domain": (3, {}),  # one client per domain
    "domain_split": (6, {}),  # a multiple of the domains
}


def test_every_partitioner_has_a_case():
    assert set(PARTITIONERS.names()) == set(PARTITION_CASES), "add the new partitioner to PARTITION_CASES"


@pytest.mark.parametrize("kind", PARTITIONERS.names())
def test_a_partition_is_disjoint_complete_sorted_and_seeded(kind):
    labels = np.random.default_rng(1).permutation(np.repeat(np.arange(10), 60)).astype(np.int64)
    domains = np.random.default_rng(2).integers(0, 3, len(labels)).astype(np.int64)
    clients, settings = PARTITION_CASES[kind]

    def draw(seed: int) -> list[np.ndarray]:
        return partition(kind, labels, clients, seed=seed, min_size=5, domains=domains, **settings)

    parts = draw(0)
    assert len(parts) == clients and all(len(p) >= 5 for p in parts)
    assert all(np.array_equal(p, np.sort(p)) and np.issubdtype(p.dtype, np.integer) for p in parts)
    everything = np.concatenate(parts)
    assert len(everything) == len(np.unique(everything)) == len(labels)  # each sample with exactly one client
    assert all(np.array_equal(a, b) for a, b in zip(parts, draw(0)))  # the same seed, the same partition
