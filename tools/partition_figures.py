"""The label histograms of docs/how-to/choose-heterogeneity.md: each partition below, as a study's YAML gives it,
split over 10 clients of the built-in digits data by the engine's own `prepare_data`, drawn as one stacked bar per
client (its samples by class, validation share included).

    python -m tools.partition_figures --write     # redraws docs/how-to/heterogeneity/*.png
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
FOLDER = REPO / "docs" / "how-to" / "heterogeneity"
CLIENTS = 10  # not-a-metric: enough clients to see a skew, few enough to read each bar

# file stem -> the partition section (beside clients: 10, seed: 0); the page shows each under its stem
FIGURES: dict[str, dict[str, Any]] = {
    "iid": {"kind": "iid"},
    "dirichlet-0.1": {"kind": "dirichlet", "alpha": 0.1},
    "dirichlet-1": {"kind": "dirichlet", "alpha": 1.0},
    "shards": {"kind": "shards", "classes_per_client": 2},
    "quantity_skew": {"kind": "quantity_skew", "alpha": 0.5},
    "flwr-DirichletPartitioner": {"kind": "flwr", "partitioner": "DirichletPartitioner", "options": {"alpha": 0.5}},
    "flwr-InnerDirichletPartitioner": {
        "kind": "flwr",
        "partitioner": "InnerDirichletPartitioner",
        "options": {"partition_sizes": [120] * CLIENTS, "alpha": 0.5},
    },
    "flwr-PathologicalPartitioner": {
        "kind": "flwr",
        "partitioner": "PathologicalPartitioner",
        "options": {"num_classes_per_partition": 2},
    },
    "flwr-ShardPartitioner": {
        "kind": "flwr",
        "partitioner": "ShardPartitioner",
        "options": {"num_shards_per_partition": 2},
    },
    "flwr-DistributionPartitioner": {
        "kind": "flwr",
        "partitioner": "DistributionPartitioner",
        "options": {
            "distribution_array": [[1.0, 2.0]] * 10,
            "num_unique_labels_per_partition": 2,
            "preassigned_num_samples_per_label": 5,
        },
    },
    "flwr-ContinuousPartitioner": {
        "kind": "flwr",
        "partitioner": "ContinuousPartitioner",
        "options": {"partition_by": "label", "strictness": 0.5},
    },
    "flwr-LinearPartitioner": {"kind": "flwr", "partitioner": "LinearPartitioner"},
    "flwr-SquarePartitioner": {"kind": "flwr", "partitioner": "SquarePartitioner"},
    # sizes in proportion to 2^i: 6 clients, as 10 would leave the first ones no sample of digits' 1,437
    "flwr-ExponentialPartitioner": {"kind": "flwr", "partitioner": "ExponentialPartitioner", "clients": 6},
    "flwr-SizePartitioner": {
        "kind": "flwr",
        "partitioner": "SizePartitioner",
        "options": {"partition_sizes": [40, 60, 80, 100, 120, 140, 160, 180, 200, 220]},
    },
}


def split(section: Mapping[str, Any]) -> tuple[list[Any], Any]:
    """Each client's labels (its whole share) under the partition `section`, on digits, as a run splits it."""
    from raytune_fl.config import ExperimentConfig
    from raytune_fl.engine.data import prepare_data

    partition = {"clients": CLIENTS, "seed": 0, "min_size": 1, **section}
    experiment = ExperimentConfig.model_validate({"dataset": "digits", "partition": partition, "batch_size": 2})
    data = prepare_data(experiment)
    labels = data.dataset.y_train
    return [labels[part] for part in data.client_parts], data.dataset.num_classes


def draw(stem: str, out: Path) -> Path:
    """One stacked bar per client: its samples by class."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    clients, classes = split(FIGURES[stem])
    counts = np.array([np.bincount(labels, minlength=classes) for labels in clients])
    figure, axes = plt.subplots(figsize=(4.8, 2.6), dpi=80)
    left = np.zeros(len(clients))
    colours = plt.get_cmap("tab10")
    for label in range(classes):
        axes.barh(range(len(clients)), counts[:, label], left=left, color=colours(label % 10), label=str(label))
        left += counts[:, label]
    axes.set_xlabel("samples (colour: class)")
    axes.set_ylabel("client")
    axes.set_yticks(range(len(clients)))
    axes.invert_yaxis()
    axes.set_title(stem, fontsize=10)
    figure.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{stem}.png"
    figure.savefig(path, metadata={"Software": None})  # no version stamp: a redraw changes only with the split
    plt.close(figure)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.partition_figures", description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"redraw every figure into {FOLDER.relative_to(REPO)}")
    parser.add_argument("--out", type=Path, default=FOLDER, help="where the figures go (default: the docs' folder)")
    parser.add_argument("stems", nargs="*", help=f"which (default: all of {', '.join(FIGURES)})")
    args = parser.parse_args(argv)
    if unknown := [s for s in args.stems if s not in FIGURES]:
        parser.error(f"unknown figure {unknown[0]!r}; known: {', '.join(FIGURES)}")
    if not args.write and args.out == FOLDER:
        parser.error("--write redraws the docs' figures; or give --out DIR")
    for stem in args.stems or FIGURES:
        print(draw(stem, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
