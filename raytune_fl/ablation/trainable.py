"""An ablation cell as a Tune trial: the federated trial at the cell's configuration."""

from __future__ import annotations

from typing import Any

from raytune_fl.ablation.plan import AblationCell
from raytune_fl.config import VariantTrials


def ablation_trial(config: dict[str, Any], *, cells: dict[str, AblationCell], system_metrics: bool = False) -> None:
    """The cell Tune's `config` names, run as a trial with every hyperparameter fixed (nothing is searched); a cell
    of a PBT study replays its schedule, segment by segment."""
    from raytune_fl.tune.trainable import federated_trial

    cell = cells[config["cell"]]
    trials = VariantTrials(cell.experiment, cell.method, cell.trial.params)
    federated_trial({}, trials=trials, system_metrics=system_metrics, replay=cell.schedule)
