"""The partition record a user looks at: a per-client table (class counts, size, domain), Parquet, heat map."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from raytune_fl.data.partition import client_domains
from raytune_fl.data.split import label_histogram

if TYPE_CHECKING:  # pandas (and pyarrow with it) is imported where a table is made: ~40 MiB in every client
    import pandas as pd  # actor, which imports this package and never makes one

FIXED_COLUMNS = ("client", "num_samples", "domain")
ANNOTATE_MAX = 20  # annotate cell counts when the matrix is at most this many rows and columns
TICKS_MAX = 60  # label at most this many clients / classes on an axis


def class_columns(num_classes: int, class_names: Sequence[str] = ()) -> list[str]:
    """Column names of the class counts: the class names when given, else ``class_<i>``."""
    if class_names and len(class_names) != num_classes:
        raise ValueError(f"class_names has {len(class_names)} names but num_classes={num_classes}")
    names = [str(n) for n in class_names] if class_names else [f"class_{i}" for i in range(num_classes)]
    clash = sorted({n for n in names if names.count(n) > 1 or n in FIXED_COLUMNS})
    if clash:
        raise ValueError(f"class_names must be distinct and not one of {FIXED_COLUMNS}, got {clash}")
    return names


def partition_table(
    labels: np.ndarray,
    parts: Sequence[np.ndarray],
    num_classes: int,
    class_names: Sequence[str] = (),
    domains: np.ndarray | None = None,
    domain_names: Sequence[str] = (),
) -> pd.DataFrame:
    """One row per client: ``client``, ``num_samples``, ``domain``, then one count column per class.

    ``domain`` is the client's domain name (``domain_names[id]``, or ``domain_<id>`` without names) when all
    its samples share one domain, else None (and None throughout without ``domains``).
    """
    columns = class_columns(num_classes, class_names)
    hist = label_histogram(labels, list(parts), num_classes)
    if domains is not None and len(np.asarray(domains)) != len(np.asarray(labels)):
        raise ValueError(f"domains has {len(np.asarray(domains))} entries but labels has {len(np.asarray(labels))}")

    def name(d: int | None) -> str | None:
        if d is None:
            return None
        return str(domain_names[d]) if d < len(domain_names) else f"domain_{d}"

    import pandas as pd

    table = pd.DataFrame(
        {
            "client": np.arange(len(parts), dtype=np.int64),
            "num_samples": hist.sum(axis=1).astype(np.int64),
            "domain": pd.Series([name(d) for d in client_domains(list(parts), domains)], dtype=object),
        }
    )
    counts = pd.DataFrame(hist, columns=columns)
    return pd.concat([table, counts], axis=1)


def save_partition_parquet(table: pd.DataFrame, path: str | Path) -> Path:
    """Write the table (no index) with pyarrow; parent folders are created. Returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table.to_parquet(path, engine="pyarrow", index=False)
    return path


def _row_label(row: pd.Series) -> str:
    label = f"client {row['client']} (n={row['num_samples']})"
    domain = row.get("domain")
    if domain is not None and not (isinstance(domain, float) and math.isnan(domain)):
        label += f" [{domain}]"
    return label


def partition_heatmap(table: pd.DataFrame, path: str | Path, title: str) -> Path:
    """A PNG heat map of ``table`` (from :func:`partition_table`): clients down, classes across.

    Cell counts are written in when the matrix is at most 20 x 20; y tick labels carry each client's
    sample count and, when present, its domain. Renders with the Agg canvas directly (no pyplot, no
    global backend change). Returns the path.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    classes = [c for c in table.columns if c not in FIXED_COLUMNS]
    if len(table) == 0 or not classes:
        raise ValueError(f"nothing to draw: the table has {len(table)} clients and {len(classes)} class columns")
    matrix = table[classes].to_numpy(dtype=np.int64)
    n_rows, n_cols = matrix.shape

    fig = Figure(figsize=(min(max(5.0, 0.55 * n_cols + 3.5), 30.0), min(max(3.0, 0.35 * n_rows + 1.5), 40.0)))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    image = ax.imshow(matrix, aspect="auto", cmap="viridis", interpolation="nearest")
    fig.colorbar(image, ax=ax, label="samples")

    col_step = max(1, math.ceil(n_cols / TICKS_MAX))
    ax.set_xticks(np.arange(0, n_cols, col_step))
    xlabels = [str(c) for c in classes[::col_step]]
    tilt = len(xlabels) * max(len(x) for x in xlabels) > 40  # would the labels collide when level?
    ax.set_xticklabels(xlabels, rotation=45 if tilt else 0, ha="right" if tilt else "center")
    row_step = max(1, math.ceil(n_rows / TICKS_MAX))
    ax.set_yticks(np.arange(0, n_rows, row_step))
    ax.set_yticklabels([_row_label(table.iloc[i]) for i in range(0, n_rows, row_step)])
    ax.set_xlabel("class")
    ax.set_ylabel("client")
    ax.set_title(title)

    if n_rows <= ANNOTATE_MAX and n_cols <= ANNOTATE_MAX:
        top = matrix.max() if matrix.size else 0
        for i in range(n_rows):
            for j in range(n_cols):
                value = matrix[i, j]
                colour = "black" if top and value > 0.6 * top else "white"  # viridis: light at the top end
                ax.text(j, i, str(value), ha="center", va="center", fontsize=7, color=colour)

    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=100)
    return path
