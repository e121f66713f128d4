"""Which training seeds an ablation scores: seeds the search never saw.

Every tuning trial of a study trains at the study's `base.seed` (the split at `base.partition.seed`), and the
selected configuration is the trial that scored best there: re-running it at that seed reproduces its lucky draw
exactly. So by default the ablation holds the tuning seeds out:

    held-out rule: counting up from base.seed + 1, the first N seeds that no tuning trial of any ablated variant's
    study used (the seeds each study recorded on its MLflow parent; base.seed always counts as used).

The rule is prefix-stable: N + k seeds extend the first N, so `--seeds auto` adds seeds without moving the ones
that ran. `--include-tuning-seed` (an explicit, labelled opt-in) keeps the old base.seed + 0..N-1, tuning seed
included; tuned variants are then favoured by one re-run of their selected trial.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

HELD_OUT = "held_out"  # the default rule
WITH_TUNING = "with_tuning"  # --include-tuning-seed
AUTO_START = 3  # --seeds auto's first round: the fewest seeds that give a paired interval with a spread to judge


@dataclass(frozen=True)
class SeedPlan:
    """The ablation's training seeds, the rule that chose them and the seeds the search used (MLflow records all)."""

    rule: str  # HELD_OUT or WITH_TUNING
    scored: tuple[int, ...]  # the training seeds every cell runs
    searched: tuple[int, ...]  # the training seeds tuning trials used, sorted

    @property
    def overlap(self) -> tuple[int, ...]:
        """Scored seeds a tuning trial also trained at: empty under the held-out rule."""
        return tuple(s for s in self.scored if s in set(self.searched))

    def describe(self) -> str:
        """One line for the terminal, the table and the MLflow parent."""
        searched = ", ".join(map(str, self.searched)) or "none recorded"
        scored = ", ".join(map(str, self.scored))
        if self.rule == HELD_OUT:
            return f"training seeds searched (tuning): {searched}; scored here (held out from the search): {scored}"
        return (
            f"training seeds searched (tuning): {searched}; scored here: {scored}, including the tuning seed "
            f"{', '.join(map(str, self.overlap)) or '(none overlaps)'} (--include-tuning-seed: a tuned variant's "
            "cell at it re-runs its selected trial, which favours it)"
        )


def held_out_seeds(base_seed: int, count: int, searched: Iterable[int]) -> list[int]:
    """The first `count` seeds from base_seed + 1 upwards that are not in `searched` (nor base_seed itself)."""
    used = {base_seed, *searched}
    seeds: list[int] = []
    candidate = base_seed + 1
    while len(seeds) < count:
        if candidate not in used:
            seeds.append(candidate)
        candidate += 1
    return seeds


def seed_plan(base_seed: int, count: int, searched: Iterable[int], include_tuning_seed: bool = False) -> SeedPlan:
    """The plan's seeds under the default rule, or (`include_tuning_seed`) base_seed + 0..count-1."""
    used = tuple(sorted({base_seed, *searched}))
    if include_tuning_seed:
        return SeedPlan(WITH_TUNING, tuple(base_seed + i for i in range(count)), used)
    return SeedPlan(HELD_OUT, tuple(held_out_seeds(base_seed, count, used)), used)
