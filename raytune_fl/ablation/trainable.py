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
    trial = cell.trial  # resolved once: its experiment carries the cell's privacy.* values (config/privacy.py)
    trials = VariantTrials(trial.experiment, cell.method, trial.params)
    federated_trial({}, trials=trials, system_metrics=system_metrics, replay=cell.schedule)
