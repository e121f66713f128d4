"""Split a labelled training set across federated clients (pure numpy, deterministic per seed).

Every partitioner has the signature
``fn(labels, num_clients, *, seed, min_size=1, **kind_specific) -> list[np.ndarray]`` and returns one
sorted int64 array of positions into ``labels`` per client; the parts are disjoint and cover every
position. ``dirichlet`` reproduces docs/explanation/workload.md#partition exactly for the benchmark settings.

Label skew: ``iid``, ``dirichlet``, ``shards``; quantity skew: ``quantity_skew``; feature shift (they also
take ``domains``, per-sample domain ids): ``domain`` (one client per domain), ``domain_split`` (each
domain split over several clients). ``partition`` dispatches by name and checks the kind-specific kwargs.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from raytune_fl.errors import RaytuneFLError
from raytune_fl.registry import Registry


class PartitionError(ValueError, RaytuneFLError):
    """A partition request that is invalid or cannot be met; the message says which field and why."""


PARTITIONERS: Registry[Callable[..., list[np.ndarray]]] = Registry("partitioner")


# Every partitioner validates through these (and _check_domains, below): _check the arguments all of them take
# (messages without a kind: the same setting for every kind), _check_int and _check_alpha a kind's own settings
# (messages "<kind>: ...").


def _integer_from(value: Any, lowest: int) -> bool:
    """An integer (a numpy one too, never a bool) >= `lowest`."""
    return not isinstance(value, bool) and isinstance(value, (int, np.integer)) and bool(value >= lowest)


def _check(labels: np.ndarray, num_clients: int, min_size: int) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.ndim != 1 or not (labels.size == 0 or np.issubdtype(labels.dtype, np.integer)):
        raise PartitionError(f"labels must be a 1-D integer array, got shape {labels.shape} {labels.dtype}")
    if labels.size and labels.min() < 0:
        raise PartitionError(f"labels must be non-negative class ids, got min {labels.min()}")
    if not _integer_from(num_clients, 1):
        raise PartitionError(f"num_clients must be an integer >= 1, got {num_clients!r}")
    if not _integer_from(min_size, 0):
        raise PartitionError(f"min_size must be an integer >= 0, got {min_size!r}")
    if num_clients * min_size > len(labels):
        raise PartitionError(
            f"impossible: num_clients={num_clients} x min_size={min_size} = {num_clients * min_size} "
            f"exceeds the {len(labels)} samples; lower num_clients or min_size"
        )
    return labels


def _check_int(kind: str, name: str, value: Any, lowest: int) -> int:
    if not _integer_from(value, lowest):
        raise PartitionError(f"{kind}: {name} must be an integer >= {lowest}, got {value!r}")
    return int(value)


def _check_alpha(kind: str, alpha: Any) -> float:
    if (
        isinstance(alpha, bool)
        or not isinstance(alpha, (int, float, np.number))
        or not (math.isfinite(alpha) and alpha > 0)
    ):
        raise PartitionError(f"{kind}: alpha must be a finite number > 0, got {alpha!r}")
    return float(alpha)


@PARTITIONERS.register("iid")
def iid(labels: np.ndarray, num_clients: int, *, seed: int, min_size: int = 1) -> list[np.ndarray]:
    """Shuffle all positions and cut them into ``num_clients`` near-equal parts."""
    labels = _check(labels, num_clients, min_size)
    perm = np.random.default_rng(seed).permutation(len(labels))
    parts = [np.sort(p).astype(np.int64) for p in np.array_split(perm, num_clients)]
    smallest = min(len(p) for p in parts)
    if smallest < min_size:  # unreachable after _check (parts differ by <= 1), kept as a guard
        raise PartitionError(f"iid: smallest client has {smallest} samples < min_size={min_size}")
    return parts


@PARTITIONERS.register("dirichlet")
def dirichlet(
    labels: np.ndarray,
    num_clients: int,
    *,
    seed: int,
    alpha: float,
    min_size: int = 1,
    max_redraws: int = 1000,
) -> list[np.ndarray]:
    """Per-class Dirichlet(alpha) shares, redrawn until every client has >= ``min_size`` samples.

    Smaller alpha means more skewed (non-IID) clients. Draw order and cut arithmetic follow
    docs/explanation/workload.md#partition so that seed 0 / 10 clients / alpha 0.1 / min_size 10 gives its exact sizes.
    """
    labels = _check(labels, num_clients, min_size)
    _check_alpha("dirichlet", alpha)  # alpha stays as given: the draws and the message below use it unconverted
    max_redraws = _check_int("dirichlet", "max_redraws", max_redraws, 1)

    num_classes = int(labels.max()) + 1 if labels.size else 0
    by_class = [np.flatnonzero(labels == c) for c in range(num_classes)]  # ascending positions
    rng = np.random.default_rng(seed)
    best = -1
    for _ in range(max_redraws):
        # Draw all classes first and check sizes from the cut points alone; build parts only on success.
        all_cuts = []
        sizes = np.zeros(num_clients, dtype=np.int64)
        for idx_c in by_class:
            p = rng.dirichlet(alpha * np.ones(num_clients))
            cuts = (np.cumsum(p) * len(idx_c)).astype(int)[:-1]
            all_cuts.append(cuts)
            sizes += np.diff(np.concatenate(([0], np.clip(cuts, 0, len(idx_c)), [len(idx_c)])))
        best = max(best, int(sizes.min()))
        if sizes.min() >= min_size:
            parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
            for idx_c, cuts in zip(by_class, all_cuts):
                for j, chunk in enumerate(np.split(idx_c, cuts)):
                    parts[j].append(chunk)
            return [np.sort(np.concatenate(q)).astype(np.int64) if q else np.zeros(0, np.int64) for q in parts]
    raise PartitionError(
        f"dirichlet: no draw in {max_redraws} gave every client >= min_size={min_size} samples "
        f"(alpha={alpha}, num_clients={num_clients}, {len(labels)} samples; smallest client size in the "
        f"best draw: {best}); raise alpha or lower min_size / num_clients"
    )


# ---------------------------------------------------------------- further label / quantity skews


@PARTITIONERS.register("shards")
def shards(
    labels: np.ndarray,
    num_clients: int,
    *,
    seed: int,
    classes_per_client: int,
    min_size: int = 1,
    max_redraws: int = 100,
) -> list[np.ndarray]:
    """Pathological label skew (McMahan et al. 2017): every client holds ``classes_per_client`` label shards.

    Positions are sorted by label (stable), cut into ``num_clients * classes_per_client`` near-equal
    shards (sizes differ by <= 1, nothing dropped) and a seeded permutation deals ``classes_per_client``
    shards to each client. When every class count is a multiple of the shard size each shard holds one
    label, so a client sees at most ``classes_per_client`` labels.
    """
    labels = _check(labels, num_clients, min_size)
    classes_per_client = _check_int("shards", "classes_per_client", classes_per_client, 1)
    max_redraws = _check_int("shards", "max_redraws", max_redraws, 1)
    num_shards = num_clients * classes_per_client
    if num_shards > len(labels):
        raise PartitionError(
            f"shards: num_clients={num_clients} x classes_per_client={classes_per_client} = {num_shards} shards "
            f"exceeds the {len(labels)} samples; lower num_clients or classes_per_client"
        )
    pieces = np.array_split(np.argsort(labels, kind="stable"), num_shards)
    piece_sizes = np.array([len(q) for q in pieces], dtype=np.int64)
    rng = np.random.default_rng(seed)
    best = -1
    for _ in range(max_redraws):
        deal = rng.permutation(num_shards).reshape(num_clients, classes_per_client)
        sizes = piece_sizes[deal].sum(axis=1)
        best = max(best, int(sizes.min()))
        if sizes.min() >= min_size:
            return [np.sort(np.concatenate([pieces[j] for j in row])).astype(np.int64) for row in deal]
    raise PartitionError(
        f"shards: no deal in {max_redraws} gave every client >= min_size={min_size} samples "
        f"({num_shards} shards of {piece_sizes.min()}..{piece_sizes.max()} samples; smallest client in the best "
        f"deal: {best}); raise max_redraws or lower min_size"
    )


@PARTITIONERS.register("quantity_skew")
def quantity_skew(
    labels: np.ndarray,
    num_clients: int,
    *,
    seed: int,
    alpha: float,
    min_size: int = 1,
    max_redraws: int = 1000,
) -> list[np.ndarray]:
    """Quantity skew: labels IID, client sizes from proportions ~ Dirichlet(alpha) (smaller alpha, more uneven).

    Proportions are redrawn until every client gets >= ``min_size`` samples, then a seeded permutation
    of all positions is cut at them.
    """
    labels = _check(labels, num_clients, min_size)
    alpha = _check_alpha("quantity_skew", alpha)
    max_redraws = _check_int("quantity_skew", "max_redraws", max_redraws, 1)
    n = len(labels)
    rng = np.random.default_rng(seed)
    best = -1
    for _ in range(max_redraws):
        p = rng.dirichlet(alpha * np.ones(num_clients))
        cuts = np.clip((np.cumsum(p) * n).astype(np.int64)[:-1], 0, n)
        sizes = np.diff(np.concatenate(([0], cuts, [n])))
        best = max(best, int(sizes.min()))
        if sizes.min() >= min_size:
            perm = rng.permutation(n)
            return [np.sort(chunk).astype(np.int64) for chunk in np.split(perm, cuts)]
    raise PartitionError(
        f"quantity_skew: no draw in {max_redraws} gave every client >= min_size={min_size} samples "
        f"(alpha={alpha}, num_clients={num_clients}, {n} samples; smallest client size in the best draw: "
        f"{best}); raise alpha or lower min_size / num_clients"
    )


# ---------------------------------------------------------------- feature shift (per-sample domains)


def _check_domains(kind: str, domains: np.ndarray | None, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The validated domains array and its sorted distinct ids."""
    if domains is None:
        raise PartitionError(
            f"partition.kind {kind!r} needs a dataset with domains (per-sample domain ids), got domains=None; "
            "use a feature-shift dataset or a label-skew kind (iid, dirichlet, shards, quantity_skew)"
        )
    domains = np.asarray(domains)
    if domains.ndim != 1 or not (domains.size == 0 or np.issubdtype(domains.dtype, np.integer)):
        raise PartitionError(f"{kind}: domains must be a 1-D integer array, got shape {domains.shape} {domains.dtype}")
    if len(domains) != len(labels):
        raise PartitionError(f"{kind}: domains has {len(domains)} entries but labels has {len(labels)}")
    if domains.size and domains.min() < 0:
        raise PartitionError(f"{kind}: domains must be non-negative domain ids, got min {domains.min()}")
    return domains, np.unique(domains)


@PARTITIONERS.register("domain")
def domain(
    labels: np.ndarray,
    num_clients: int,
    *,
    seed: int,
    min_size: int = 1,
    domains: np.ndarray | None = None,
) -> list[np.ndarray]:
    """Feature shift, one client per domain: client i holds every position of the i-th (sorted) domain id.

    Deterministic; ``seed`` is accepted for a uniform signature and unused.
    """
    labels = _check(labels, num_clients, min_size)
    domains, ids = _check_domains("domain", domains, labels)
    if num_clients != len(ids):
        raise PartitionError(
            f"domain: num_clients={num_clients} but the dataset has {len(ids)} domains (ids {ids.tolist()}); "
            f"'domain' makes one client per domain, so set num_clients={len(ids)} (or use 'domain_split')"
        )
    parts = [np.flatnonzero(domains == d).astype(np.int64) for d in ids]
    for d, p in zip(ids, parts):
        if len(p) < min_size:
            raise PartitionError(f"domain: domain {d} has {len(p)} samples < min_size={min_size}; lower min_size")
    return parts


@PARTITIONERS.register("domain_split")
def domain_split(
    labels: np.ndarray,
    num_clients: int,
    *,
    seed: int,
    min_size: int = 1,
    domains: np.ndarray | None = None,
    alpha: float | None = None,
    max_redraws: int = 1000,
) -> list[np.ndarray]:
    """Feature shift, each domain split over ``num_clients / n_domains`` clients, domain-major order.

    Clients ``0..k-1`` hold domain 0 (the smallest id), ``k..2k-1`` domain 1, and so on. Within a
    domain the split is IID (seeded permutation, near-equal parts) or, with ``alpha``, the Dirichlet
    label skew of :func:`dirichlet` applied to that domain's samples.
    """
    labels = _check(labels, num_clients, min_size)
    domains, ids = _check_domains("domain_split", domains, labels)
    if alpha is not None:
        _check_alpha("domain_split", alpha)
    max_redraws = _check_int("domain_split", "max_redraws", max_redraws, 1)
    if num_clients % len(ids):
        raise PartitionError(
            f"domain_split: num_clients={num_clients} is not a multiple of the {len(ids)} domains "
            f"(ids {ids.tolist()}); use a multiple of {len(ids)}"
        )
    per_domain = num_clients // len(ids)
    parts: list[np.ndarray] = []
    for j, d in enumerate(ids):
        where = np.flatnonzero(domains == d)
        domain_seed = int(np.random.SeedSequence([int(seed), j]).generate_state(1)[0])  # one stream per domain
        try:
            if alpha is None:
                sub = iid(labels[where], per_domain, seed=domain_seed, min_size=min_size)
            else:
                sub = dirichlet(
                    labels[where], per_domain, seed=domain_seed, alpha=alpha, min_size=min_size, max_redraws=max_redraws
                )
        except PartitionError as e:
            raise PartitionError(f"domain_split: domain {d} ({len(where)} samples): {e}") from None
        parts.extend(where[q].astype(np.int64) for q in sub)
    return parts


def client_domains(parts: list[np.ndarray], domains: np.ndarray | None) -> list[int | None]:
    """Each client's single domain id when all its samples share one domain, else None (also for empty parts)."""
    if domains is None:
        return [None] * len(parts)
    domains = np.asarray(domains)
    out: list[int | None] = []
    for p in parts:
        present = np.unique(domains[np.asarray(p, dtype=np.int64)])
        out.append(int(present[0]) if len(present) == 1 else None)
    return out


# ---------------------------------------------------------------- dispatch

_FIXED = ("labels", "num_clients", "seed", "min_size", "domains")


def partition(
    kind: str,
    labels: np.ndarray,
    num_clients: int,
    *,
    seed: int,
    min_size: int = 1,
    domains: np.ndarray | None = None,
    **kwargs: Any,
) -> list[np.ndarray]:
    """Partition with the partitioner registered under ``kind`` (extra kwargs are kind-specific).

    ``domains`` (per-sample domain ids) reaches only partitioners that take it and is ignored by the
    others. A kwarg of None means "not given" and is dropped; any other kwarg the partitioner does not
    take is a PartitionError naming it, and so is a missing required one.
    """
    fn = PARTITIONERS.get(kind)
    params = inspect.signature(fn).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    own = [n for n, p in params.items() if n not in _FIXED and p.kind is not inspect.Parameter.VAR_KEYWORD]
    given = {k: v for k, v in kwargs.items() if v is not None}
    for name in given:
        if name not in params and not takes_any:
            takes = ", ".join(own) or "no kind-specific settings"
            raise PartitionError(f"partition.{name} is not used by {kind!r} (it takes: {takes})")
    for name in own:
        if params[name].default is inspect.Parameter.empty and name not in given:
            raise PartitionError(f"partition.{name} is required by {kind!r}")
    if "domains" in params:
        given["domains"] = domains
    return fn(labels, num_clients, seed=seed, min_size=min_size, **given)
