"""tracking/records.py by hand: what each run starts and ends with, built from the resolved objects (no MLflow)."""

from __future__ import annotations

import subprocess
import sys

from raytune_fl.ablation.plan import make_plan
from raytune_fl.ablation.sources import variant_source
from raytune_fl.config import Objective, TrialSpec, VariantTrials, parse_space
from raytune_fl.tracking.records import (
    OptunaStudy,
    ParetoFront,
    TuneTrials,
    ablation_cell,
    ablation_parent_end,
    ablation_parent_metrics,
    experiment_params,
    trial_params,
    tune_parent,
    tune_parent_end,
)
from tests.support import tiny_space


def _space():
    return parse_space(
        {
            **tiny_space(),
            "variants": {
                "full": {"method": "univarfl", "fixed": {"eps": 0.02}, "search": {"mu": {"loguniform": [0.01, 1.0]}}},
                "fedavg": {"method": "fedavg"},
            },
        }
    )


def test_a_parent_logs_its_trials_params_minus_the_searched_names_and_the_ranges():
    space = _space()
    parent = tune_parent(space, "full", 3, optuna=OptunaStudy("s-full", "sqlite:///o.db"))
    trial = TuneTrials("full", VariantTrials(space.base, "univarfl", {"eps": 0.02})).record({"mu": 0.25}, 4)
    assert {k: v for k, v in trial.params.items() if k != "mu"} == {
        k: v for k, v in parent.params.items() if not k.startswith("search.")
    }
    assert parent.params["search.mu"] == {"loguniform": (0.01, 1.0)}
    assert parent.params["eps"] == 0.02 and parent.params["lambda"] == "D/4"  # the defaults too, as shown
    assert "mu" not in parent.params and trial.params["mu"] == 0.25
    assert parent.tags == {
        "variant": "full",
        "stage": "tune",
        "method": "univarfl",
        "dataset": "digits",
        "partition": "dirichlet(alpha=0.5)",
        "searched": "mu",
        "tuning_seeds": "0",  # every trial's training seed: the ablation holds it out
        "optuna_study": "s-full",
        "optuna_storage": "sqlite:///o.db",
        "sampler": "tpe",  # how its trials were proposed and stopped
        "scheduler": "asha",
    }
    assert trial.name == "full-004" and trial.tags == {"variant": "full", "method": "univarfl", "stage": "tune"}
    assert trial.description == "Trial 4 of variant `full` (method `univarfl`): `mu=0.25`."
    assert parent.config["variant"]["search"]["mu"]["loguniform"] == [0.01, 1.0]  # the file, as written


def test_a_variant_with_nothing_searched_logs_exactly_its_trials_params():
    space = _space()
    parent = tune_parent(space, "fedavg", 1)
    trial = TuneTrials("fedavg", VariantTrials.of(space, "fedavg")).record({}, 0)
    assert parent.params == trial.params == trial_params(TrialSpec.resolve(space.base, "fedavg", {}))
    assert parent.tags["searched"] == "(none)" and "optuna_study" not in parent.tags


def test_the_synthetic_settings_are_params_only_of_synthetic_data():
    space = _space()
    assert not any(k.startswith("synthetic.") for k in experiment_params(space.base))
    synthetic = space.base.model_copy(update={"dataset": "synthetic"})
    assert any(k.startswith("synthetic.") for k in experiment_params(synthetic))


def test_a_finished_study_ends_its_parent_with_best_and_counts_and_a_failed_one_with_nothing():
    end = tune_parent_end({"mu": 0.25}, {"val_acc": 0.5}, {"finished": 2, "error": 1}, seed=7)
    assert end.status == "FINISHED"
    assert end.metrics == {"best_val_acc": 0.5, "trials_finished": 2, "trials_error": 1}
    assert end.tags == {"best.mu": 0.25, "best_basis": "single trial, seed 7"}
    failed = tune_parent_end({}, {}, {"error": 3}, seed=7)
    assert (failed.status, failed.metrics, failed.tags) == ("FAILED", {}, {})
    assert ablation_parent_metrics(12.5, {"finished": 3}) == {"wall_time_s": 12.5, "runs_finished": 3.0}


def test_the_front_the_model_run_and_the_resume_command_are_fields_of_the_records():
    assert tune_parent(_space(), "fedavg", 1).resume_command == ""
    assert tune_parent(_space(), "fedavg", 1, resume_command="tune --resume").resume_command == "tune --resume"
    front = ParetoFront((Objective(metric="val_acc", mode="max"), Objective(metric="val_loss", mode="min")), ("t1",))
    end = tune_parent_end({"mu": 0.25}, {"val_acc": 0.5}, {"finished": 2}, 7, (), front, model_run_id="r9")
    assert end.front == ("t1",)
    assert end.tags["objectives"] == "val_acc:max,val_loss:min" and end.tags["model_run_id"] == "r9"
    failed = tune_parent_end({}, {}, {"error": 3}, 7, (), front)  # the objectives are said even when none scored
    assert (failed.status, failed.tags, failed.front) == ("FAILED", {"objectives": "val_acc:max,val_loss:min"}, ())
    assert tune_parent_end({"mu": 0.25}, {"val_acc": 0.5}, {"finished": 2}, 7).front == ()


def test_an_ablation_parent_adds_its_seeds_and_counts_once_closed_and_its_table_when_written():
    end = ablation_parent_end([1, 2], "", 3.0, {"finished": 2})
    assert end.tags == {"seeds": "1,2"} and end.metrics == {"wall_time_s": 3.0, "runs_finished": 2.0}
    auto = ablation_parent_end([1, 2, 3], "half-width <= 2", 3.0, {})
    assert auto.tags == {"seeds": "1,2,3", "seeds_auto": "half-width <= 2"}


def test_an_ablation_cell_is_tagged_with_where_it_sits_and_logs_the_trial_params():
    space = _space()
    sources = {name: variant_source(space, name, None) for name in space.variants}
    plan = make_plan(space, [], [0, 1], sources)
    cell = next(c for c in plan.cells if c.variant == "full" and c.seed == 1)
    run = ablation_cell(cell, sources["full"].note)
    assert run.name == "full/seed1/default" and run.rounds == space.base.rounds
    assert run.tags == {
        "stage": "ablation",
        "role": "trial",
        "variant": "full",
        "method": "univarfl",
        "seed": "1",
        "partition_seed": str(space.base.partition.seed),
        "setting": "default",
        "cell": "full/seed1/default",
        "study_run_id": "none",
    }
    assert run.params == trial_params(TrialSpec.resolve(cell.experiment, "univarfl", {"eps": 0.02}))
    assert run.params["seed"] == 1


def test_the_records_import_neither_mlflow_nor_torch():
    code = "import sys, raytune_fl.tracking.records; print(sorted({'mlflow', 'torch'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_each_scheduler_is_described_in_words():
    from raytune_fl.config import TuneSettings
    from raytune_fl.tracking.describe import stopping_text

    def text(scheduler):
        return stopping_text(TuneSettings.model_validate({"sampler": "random", "scheduler": scheduler}), 10)

    assert text({}) == "ASHA on rounds (grace 8, reduction 2)"
    assert text({"hyperband": {}}) == "Hyperband on rounds (max 10, reduction 3)"
    assert text({"median": {"grace_period": 3}}) == "median stopping on rounds (grace 3, at least 3 trials)"
    assert text({"pbt": {"interval": 3}}) == "PBT over rounds (every 3 rounds, quantile 0.25)"
    assert text({"pbt": {"interval": 3, "explore": "bandit"}}) == "PB2 over rounds (every 3 rounds, quantile 0.25)"
    assert text({"asha": None}) == "no early stopping"
