"""Why UniVarFL's variance term does or does not pull: each loss term's gradient next to cross-entropy's, round by
round, with the classifier's spectrum, under UniVarFL's own protocol shape (search_spaces/papers/univarfl_paper.yaml:
E = 10, all clients, digits at Dirichlet alpha 0.01).

Controlled runs in this process (no Ray): FedAvg, FedUV as its official code computes it at its defaults (std hinge,
lambda 2.5, RBF uniformity mu 0.5), UniVarFL at the paper's defaults (variance hinge, lambda = D/4 = 2.5, energy
mu 0.5) and UniVarFL with lambda x10 (25); the same seeds, splits and initial weights for all. Each row: a method's
mean over the seeds at one probed round. `ratio` is ‖lambda ∇ L_V‖ / ‖∇ CE‖, the variance hinge's pull next to
cross-entropy's, `per unit lambda` the same divided by lambda (the term's own gradient).

    python -m benchmarks.term_gradients            # about 10 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from raytune_fl.config import load_space
from raytune_fl.engine.federation import Federation

SPACE = Path(__file__).resolve().parents[1] / "search_spaces" / "papers" / "univarfl_paper.yaml"
RUNS: dict[str, tuple[str, dict[str, Any], float]] = {  # label -> (method, params, the variance weight lambda)
    "fedavg": ("fedavg", {}, 0.0),
    "feduv official": ("feduv", {"fidelity": "official"}, 2.5),
    "univarfl paper": ("univarfl", {}, 2.5),
    "univarfl lambda 25": ("univarfl", {"lambda": 25.0}, 25.0),
}
SHOWN = ("test_acc", "sv_min_over_max", "sv_effective_rank", "grad_norm_ce", "grad_norm_variance", "grad_cos_variance")


def run(label: str, seed: int, rounds: int, alpha: float) -> list[dict[str, float]]:
    method, params, _ = RUNS[label]
    base = load_space(SPACE).base
    partition = base.partition.model_copy(update={"alpha": alpha, "seed": seed})
    experiment = base.model_copy(update={"seed": seed, "rounds": rounds, "partition": partition})
    rows: list[dict[str, float]] = []
    Federation(experiment, method, params).run(lambda report: rows.append(dict(report.metrics())))
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=2, help="seeds (each its own split too)")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--alpha", type=float, default=0.01)
    args = parser.parse_args(argv)
    print(f"{SPACE.name} at alpha {args.alpha}, {args.rounds} rounds, seeds 0..{args.seeds - 1}", flush=True)
    results = {label: [run(label, seed, args.rounds, args.alpha) for seed in range(args.seeds)] for label in RUNS}
    header = ["method", "round", *SHOWN, "ratio", "per unit lambda"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for label, seeds in results.items():
        weight = RUNS[label][2]
        for index, row in enumerate(seeds[0]):
            if "grad_norm_ce" not in row:
                continue  # not a probed round
            mean = {k: statistics.fmean(s[index].get(k, float("nan")) for s in seeds) for k in SHOWN}
            ratios = [s[index].get("grad_norm_variance", 0.0) / s[index]["grad_norm_ce"] for s in seeds]
            ratio = statistics.fmean(ratios)
            per_unit = f"{ratio / weight:.4f}" if weight else "–"
            cells = [f"{mean[k]:.3f}" if mean[k] == mean[k] else "–" for k in SHOWN]
            print(f"| {label} | {index + 1} | " + " | ".join(cells) + f" | {ratio:.4f} | {per_unit} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
