"""FedAvg in two stages (`resources.partial_sums`): each worker sums its clients' weighted deltas, the server adds
the workers' sums and divides once.

    sum_i (n_i / n) * delta_i  =  (sum_workers sum_{i in worker} n_i * delta_i) / n

The same mean as aggregators/fedavg.py's `weighted_mean_delta` up to float summation order (the products here are
float64, the clients grouped by worker), so a seeded run with partial sums matches one without to ~1e-7 relative,
not bit for bit. Only FedAvg's own rule can be split this way; the round driver decides where it applies
(engine/federation.py's `partial_sums`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from raytune_fl.aggregators.fedavg import apply_delta, is_running_statistic
from raytune_fl.types import ClientUpdate, PartialSum, Weights, is_float_entry


def partial_sum(updates: Sequence[ClientUpdate]) -> PartialSum:
    """The float entries of `updates`' deltas, weighted by their samples and summed (client order)."""
    if not updates:
        raise ValueError("cannot sum zero client updates")
    ordered = sorted(updates, key=lambda u: u.client_id)
    keys = list(ordered[0].delta)
    weighted = {key: np.zeros(ordered[0].delta[key].shape, dtype=np.float64) for key in keys}
    plain = {key: np.zeros_like(weighted[key]) for key in keys if is_running_statistic(key)}
    for update in ordered:
        for key in keys:
            value = update.delta[key].astype(np.float64)
            weighted[key] += update.num_samples * value
            if key in plain:
                plain[key] += value
    one_client = sum(int(v.nbytes) for v in ordered[0].delta.values() if is_float_entry(v))
    ids = tuple(u.client_id for u in ordered)
    return PartialSum(ids, sum(u.num_samples for u in ordered), weighted, plain, one_client)


def combine(parts: Sequence[PartialSum]) -> PartialSum:
    """Several workers' sums as one (in order of their lowest client id: the same float sum however they arrive)."""
    if not parts:
        raise ValueError("cannot combine zero partial sums")
    ordered = sorted(parts, key=lambda part: part.client_ids[0])
    ids = sorted(i for part in ordered for i in part.client_ids)
    if len(ids) != len(set(ids)):
        raise ValueError(f"partial sums overlap: clients {sorted({i for i in ids if ids.count(i) > 1})} twice")
    weighted = {key: sum((part.weighted[key] for part in ordered[1:]), ordered[0].weighted[key].copy())
                for key in ordered[0].weighted}  # fmt: skip
    plain = {key: sum((part.plain[key] for part in ordered[1:]), ordered[0].plain[key].copy())
             for key in ordered[0].plain}  # fmt: skip
    samples = sum(part.samples for part in ordered)
    return PartialSum(tuple(ids), samples, weighted, plain, ordered[0].delta_bytes)


def summed(updates: Sequence[ClientUpdate]) -> list[ClientUpdate]:
    """`updates` as a worker sends them with partial sums: each client's delta dropped, all pointing at one sum."""
    total = partial_sum(updates)
    return [dataclasses.replace(update, delta={}, summed=total) for update in updates]


def round_sum(updates: Sequence[ClientUpdate]) -> PartialSum:
    """The whole round's sum from its updates (each worker's sum once); every update must carry one."""
    parts: dict[int, PartialSum] = {}
    for update in updates:
        if update.summed is None:
            raise ValueError(f"client {update.client_id} sent its own delta in a round of partial sums")
        parts.setdefault(id(update.summed), update.summed)
    total = combine(list(parts.values()))
    reported = sorted(u.client_id for u in updates)
    if list(total.client_ids) != reported:
        raise ValueError(f"the partial sums cover clients {list(total.client_ids)}, the round has {reported}")
    return total


def fedavg_of_sums(global_weights: Weights, updates: Sequence[ClientUpdate], plain_statistics: bool) -> Weights:
    """FedAvg's new global model from the round's partial sums. `plain_statistics` (batchnorm.aggregate: mean):
    the running statistics become the plain mean of the clients' own, as aggregators/fedavg.py's
    `plain_mean_statistics` sets them."""
    total = round_sum(updates)
    delta = {key: (value / total.samples).astype(global_weights[key].dtype) for key, value in total.weighted.items()}
    if plain_statistics:
        count = len(total.client_ids)
        delta.update({key: (value / count).astype(global_weights[key].dtype) for key, value in total.plain.items()})
    return apply_delta(global_weights, delta, updates)
