"""``partition: {kind: flwr, partitioner: NAME, options: {...}}``: any horizontal partitioner of Flower Datasets
(`flwr_datasets.partitioner`) by class name, run on the training labels and per-sample columns.

The table a partitioner sees has a ``label`` column, the dataset's ``columns_train`` (e.g. ``writer_id``, which
``NaturalIdPartitioner`` makes one client per value of) and a row column that maps each partition back to positions
in ``x_train``. Its rows are shuffled by ``partition.seed`` first, as Flower's ``FederatedDataset`` does
(``shuffle=True``): a partitioner without a seed of its own (``IidPartitioner`` cuts contiguous blocks) is then
seeded too. The options a partitioner takes are read off its ``__init__`` (``inspect.signature``), never listed by
hand; ``flwr_datasets`` (with ``datasets``, about 3 s to import) is imported only when a split asks for it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from typing import Any

import numpy as np

from raytune_fl.data.partition import PartitionError

KIND = "flwr"
LABEL = "label"
_ROW = "__row__"  # the position in x_train of each row of the table
# what the project supplies from its own fields: the split's count and seed are one setting each, not options
_SUPPLIED = {"num_partitions": "partition.clients", "seed": "partition.seed"}


@functools.lru_cache(maxsize=1)
def horizontal_partitioners() -> dict[str, type]:
    """Every concrete horizontal partitioner class of flwr_datasets.partitioner, by name."""
    import flwr_datasets.partitioner as module

    found = {}
    for name in module.__all__:
        cls = getattr(module, name)
        if isinstance(cls, type) and issubclass(cls, module.Partitioner) and not _refusal(cls, module.Partitioner):
            found[name] = cls
    return found


def _refusal(cls: type, base: type) -> str | None:
    """Why a class of flwr_datasets.partitioner cannot split clients' samples, or None where it can."""
    if cls is base or inspect.isabstract(cls):
        return "is the abstract base of the partitioners"
    if cls.__module__.rsplit(".", 1)[-1].startswith("vertical"):
        return "is a vertical partitioner: it splits the columns (features) among parties, not the samples"
    return None


def partitioner_class(name: str) -> type:
    """The horizontal partitioner class called `name`; a PartitionError naming partition.partitioner otherwise."""
    import flwr_datasets.partitioner as module

    known = horizontal_partitioners()
    if name in known:
        return known[name]
    cls = getattr(module, name, None) if name in module.__all__ else None
    why = _refusal(cls, module.Partitioner) if isinstance(cls, type) else None
    what = f"{name!r} {why}" if why else f"unknown partitioner {name!r}"
    raise PartitionError(f"partition.partitioner: {what}; the horizontal ones: {', '.join(sorted(known))}")


def _parameters(cls: type) -> dict[str, inspect.Parameter]:
    params = inspect.signature(cls).parameters  # its __init__'s, without self
    return {n: p for n, p in params.items() if n != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


def count_from_data(name: str) -> bool:
    """Whether the partitioner decides the number of clients itself (no `num_partitions`: one client per natural id,
    per group of ids, or per size given), so partition.clients is read off the data."""
    return "num_partitions" not in _parameters(partitioner_class(name))


def check_options(name: str, options: Mapping[str, Any]) -> None:
    """`options` fit the partitioner's `__init__`: each one it takes, none the project supplies, every required one
    (but partition_by, which defaults to label) given. Errors name partition.options.<name> and list what it takes."""
    params = _parameters(partitioner_class(name))
    own = [n for n in params if n not in _SUPPLIED]
    takes = f"{name} takes: {', '.join(own) or 'no options'}"
    for option in options:
        if option in _SUPPLIED and option in params:
            raise PartitionError(f"partition.options.{option}: set by {_SUPPLIED[option]}, not in options; {takes}")
        if option not in params:
            raise PartitionError(f"partition.options.{option}: not an argument of {name}; {takes}")
    for option in own:
        if params[option].default is inspect.Parameter.empty and option not in options and option != "partition_by":
            raise PartitionError(f"partition.options.{option}: required by {name}; {takes}")


def build(name: str, options: Mapping[str, Any], num_clients: int, seed: int) -> Any:
    """The partitioner: `options` with the project's own settings where its `__init__` takes them."""
    cls = partitioner_class(name)
    check_options(name, options)
    params = _parameters(cls)
    given = {k: _as_annotated(v, params[k]) for k, v in options.items()}
    supplied = {"num_partitions": num_clients, "seed": seed, "partition_by": given.get("partition_by", LABEL)}
    given.update({k: v for k, v in supplied.items() if k in params})
    try:
        return cls(**given)
    except (ValueError, TypeError) as error:  # its own checks of the values (alpha <= 0, sizes, ...)
        raise PartitionError(f"partition.options: {name} refused them: {error}") from None


def _as_annotated(value: Any, param: inspect.Parameter) -> Any:
    """A YAML list where the argument takes only a numpy array (DistributionPartitioner's distribution_array)."""
    annotation = str(param.annotation)
    if isinstance(value, list) and "ndarray" in annotation and "list" not in annotation:
        return np.asarray(value)
    return value


def table(labels: np.ndarray, columns: Mapping[str, np.ndarray], seed: int) -> Any:
    """The `datasets.Dataset` a partitioner reads: label, the per-sample columns and the row's position, its rows in
    an order shuffled by `seed`."""
    import datasets

    if LABEL in columns or _ROW in columns:
        raise PartitionError(f"columns_train: {LABEL!r} and {_ROW!r} are the table's own columns; rename the column")
    order = np.random.default_rng(seed).permutation(len(labels))
    data = {LABEL: np.asarray(labels)[order], **{k: np.asarray(v)[order] for k, v in columns.items()}, _ROW: order}
    return datasets.Dataset.from_dict(data)


def flwr_partition(
    name: str,
    options: Mapping[str, Any],
    labels: np.ndarray,
    num_clients: int,
    *,
    seed: int,
    min_size: int = 1,
    columns: Mapping[str, np.ndarray] | None = None,
) -> list[np.ndarray]:
    """Each partition's sorted int64 positions in `labels`, for partition ids 0..num_partitions-1 of the partitioner
    `name` (`num_clients` is its num_partitions where it takes one). A client under `min_size` is refused."""
    columns = dict(columns or {})
    rows = table(labels, columns, seed)
    by = options.get("partition_by", LABEL)
    if "partition_by" in _parameters(partitioner_class(name)) and by not in rows.column_names:
        has = ", ".join(c for c in rows.column_names if c != _ROW)
        raise PartitionError(f"partition.options.partition_by: the dataset has no column {by!r}; it has: {has}")
    partitioner = build(name, options, num_clients, seed)
    partitioner.dataset = rows
    try:
        parts = [_positions(partitioner.load_partition(i)) for i in range(partitioner.num_partitions)]
    except ValueError as error:  # e.g. more partitions than samples, a Dirichlet draw that never fits
        raise PartitionError(f"partition.options: {name} could not split the data: {error}") from None
    smallest = int(np.argmin([len(p) for p in parts])) if parts else 0
    if parts and len(parts[smallest]) < min_size:
        raise PartitionError(
            f"partition.min_size: {name}'s smallest client (client {smallest}) has {len(parts[smallest])} samples "
            f"< min_size={min_size}; lower min_size or change partition.options"
        )
    return parts


def _positions(part: Any) -> np.ndarray:
    return np.sort(np.asarray(part[_ROW], dtype=np.int64))
