"""The MLflow side of an Optuna study: parent runs of a stage, and MLflow children checked trial by trial."""

from __future__ import annotations

import optuna
from optuna.trial import TrialState

from raytune_fl.tracking import store
from raytune_fl.tracking.schema import STAGE_TUNE, TAG_TRIAL_STATUS


def tune_parents(client, experiment: str) -> list:
    eid = store.experiment_id(client, experiment)
    return [r for r in store.stage_runs(client, eid, STAGE_TUNE) if not store.is_child(r)]


def compare_with_optuna(client, experiment: str, parent, study: optuna.Study) -> dict[str, int]:
    """Every MLflow child run of `parent` is one Optuna trial: the same searched params, its final val_acc the
    trial's value, its earlier rounds' val_acc the trial's intermediate values. Returns the trial_status counts."""
    eid = store.experiment_id(client, experiment)
    children = [r for r in store.child_runs(client, eid, parent.info.run_id) if r.info.status == "FINISHED"]
    trials = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert len(children) == len(trials) > 0
    statuses: dict[str, int] = {}
    unmatched = list(trials)
    for run in children:
        params = {name: float(run.data.params[name]) for name in ("mu", "lambda")}
        [trial] = [t for t in unmatched if t.params == params]  # exactly one, exactly equal
        unmatched.remove(trial)
        assert trial.value == run.data.metrics["val_acc"]
        history = {m.step: m.value for m in store.metric_history(client, run.info.run_id, "val_acc")}
        # Tune hands the searcher every round but the last as an intermediate value, the last as the trial's value
        # (a round on which ASHA stopped the trial is never an intermediate value)
        assert {**trial.intermediate_values, max(history): trial.value} == history
        status = run.data.tags[TAG_TRIAL_STATUS]
        statuses[status] = statuses.get(status, 0) + 1
    return statuses
