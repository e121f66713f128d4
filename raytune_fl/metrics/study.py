"""The names the readers derive from the rounds: what a study's or an ablation's parent run logs, and the
dashboard's own; `GROUPS` says what each one means.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

VAL_ACC_SE: Final = "val_acc_se"
BEST_PREFIX: Final = "best_"
ELAPSED_S: Final = "elapsed_s"
LAST_K: Final = 5  # rounds the ablation's late-training score averages: less round-to-round jitter, still the end
TEST_ACC_LAST_K: Final = "test_acc_last5"  # the name says its LAST_K


GROUPS: Final[Mapping[str, Mapping[str, str]]] = {
    "derived by the readers": {
        VAL_ACC_SE: "a study's summary: binomial standard error of the selected trial's val_acc (tune/uncertainty.py)",
        BEST_PREFIX: "best_<metric>: a tune parent run's copy of its selected trial's final metrics",
        ELAPSED_S: "the dashboard's: wall seconds from a trial's start to the end of the round (setup included)",
        TEST_ACC_LAST_K: f"the ablation table's: the mean of a run's test_acc over its last {LAST_K} evaluated rounds "
        "(the results pages report it beside the final round's)",
    },
}
