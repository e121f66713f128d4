"""The ablation runner: grid parsing and plans by hand, then a real tuned study + ablation on Ray and MLflow whose
table is checked against the runs' logged metrics."""

from __future__ import annotations

import math
import statistics

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from raytune_fl.ablation.grid import NO_SETTING, parse_grid, settings
from raytune_fl.ablation.plan import make_plan
from raytune_fl.ablation.run import latest_per_cell, plan_order
from raytune_fl.ablation.sources import variant_source
from raytune_fl.ablation.table import format_cell
from raytune_fl.cli.ablate import main as ablate
from raytune_fl.config import ConfigError, parse_space
from raytune_fl.tracking.store import StudyRecord, ablation_results
from tests.support import ablate_argv, tiny_space


def space(**base):
    return parse_space(tiny_space(**base))


# ---- plans, by hand ------------------------------------------------------------------------------------


def test_grid_short_names_resolve_to_base_fields_and_values_are_yaml():
    axes = parse_grid(["alpha=0.01,1.0", "rho=0.5", "optimizer.momentum=0,0.9"])
    assert [(a.name, a.field, a.values) for a in axes] == [
        ("alpha", "partition.alpha", (0.01, 1.0)),
        ("rho", "participation", (0.5,)),
        ("optimizer.momentum", "optimizer.momentum", (0, 0.9)),
    ]


@pytest.mark.parametrize(
    "item, needle",
    [
        ("alpha", "expected KEY=V1,V2"),
        ("alpha=", "expected KEY=V1,V2"),
        ("bogus=1", "short names: alpha, rho"),
        ("resources.actors=1,2", "base.resources cannot be a grid axis"),
        ("seed=1,2", "use --seeds"),
        ("alpha=0.1,0.1", "repeated"),
    ],
)
def test_bad_grid_items_name_the_key(item, needle):
    with pytest.raises(ConfigError, match=needle):
        parse_grid([item])


def test_the_same_field_twice_is_refused():
    with pytest.raises(ConfigError, match="given twice"):
        parse_grid(["rho=0.5", "participation=1.0"])


def test_settings_are_the_product_of_the_axes_in_order():
    found = settings(space(), parse_grid(["alpha=0.1,1.0", "rho=0.5,1.0"]))
    assert list(found) == ["alpha=0.1,rho=0.5", "alpha=0.1,rho=1.0", "alpha=1.0,rho=0.5", "alpha=1.0,rho=1.0"]
    assert found["alpha=1.0,rho=0.5"].partition.alpha == 1.0
    assert found["alpha=1.0,rho=0.5"].participation == 0.5
    assert list(settings(space(), [])) == [NO_SETTING]


def test_a_value_the_field_refuses_names_the_field_and_the_setting():
    with pytest.raises(ConfigError) as error:
        settings(space(), parse_grid(["alpha=0.5,-1"]))
    assert "--grid alpha=-1" in str(error.value) and "base.partition.alpha" in str(error.value)


def test_variant_source_without_a_study_uses_the_yaml_and_says_so():
    s = parse_space(
        {
            **tiny_space(),
            "variants": {
                "full": {"method": "univarfl", "fixed": {"mu": 0.3}, "search": {"lambda": {"uniform": [0.5, 3.0]}}}
            },
        }
    )
    source = variant_source(s, "full", None)
    assert source.params == {"mu": 0.3} and source.study_run_id is None
    assert "no tuned study" in source.note and "searched lambda" in source.note


def test_variant_source_takes_the_study_selection_but_not_a_derived_rule():
    study = StudyRecord("run1", "univarfl", {"mu": 0.2, "lambda": "D/4", "eps": 0.01}, {"best_val_acc": 0.5}, 0)
    source = variant_source(space(), "full", study)
    assert source.params == {"mu": 0.2, "eps": 0.01}  # "D/4" is how the default is displayed, not a value
    assert source.study_run_id == "run1" and "run1" in source.note


def test_a_study_tuned_on_other_data_is_used_and_says_so():
    study = StudyRecord("run1", "univarfl", {"mu": 0.2}, {"best_val_acc": 0.5}, 0, dataset="mnist5k")
    source = variant_source(space(), "full", study)  # tiny_space ablates digits
    assert source.params == {"mu": 0.2} and "(tuned on mnist5k, ablated on digits)" in source.note


def test_a_study_of_another_method_is_refused():
    study = StudyRecord("run1", "fedprox", {"mu": 0.2}, {"best_val_acc": 0.5}, 0)
    with pytest.raises(ConfigError, match="variants.full.method.*--ignore-studies"):
        variant_source(space(), "full", study)


def test_plan_cells_and_fingerprint():
    s = space()
    axes = parse_grid(["alpha=0.5,1.0"])
    sources = {name: variant_source(s, name, None) for name in s.variants}
    plan = make_plan(s, axes, [0, 1], sources)
    assert [c.key for c in plan.cells][:4] == [
        "full/seed0/alpha=0.5",
        "full/seed1/alpha=0.5",
        "fedavg/seed0/alpha=0.5",
        "fedavg/seed1/alpha=0.5",
    ]
    assert len(plan.cells) == 8 and {c.experiment.seed for c in plan.cells} == {0, 1}
    same = make_plan(s, axes, [0, 1], sources)
    other = make_plan(s, axes, [0, 2], sources)
    assert plan.fingerprint == same.fingerprint != other.fingerprint


def test_a_resumed_cell_keeps_its_finished_run_and_rows_follow_the_plan():
    rows = pd.DataFrame(  # newest first, as ablation_results lists them
        {"cell": ["b", "a", "b", "a"], "status": ["error", "finished", "finished", "error"], "x": [1, 2, 3, 4]}
    )
    kept = latest_per_cell(rows)
    assert sorted(kept["x"]) == [2, 3]

    class Cell:
        def __init__(self, key):
            self.key = key

    assert list(plan_order(kept, [Cell("b"), Cell("a")])["cell"]) == ["b", "a"]


# ---- bad command lines: exit 2, the option named, Ray not needed ---------------------------------------


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--seeds", "0"], "--seeds"),
        (["--grid", "bogus=1"], "--grid bogus"),
        (["--grid", "alpha=0.5,-1"], "base.partition.alpha"),
        (["--variants", "nope"], "--variants"),
    ],
)
def test_bad_ablation_command_lines(tmp_path, capsys, extra, needle):
    argv = ablate_argv(tmp_path)
    assert ablate([*argv, *extra]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_resume_without_an_earlier_ablation_is_refused(tmp_path, capsys):
    argv = ablate_argv(tmp_path)
    assert ablate([*argv, "--resume"]) == 2
    assert "no ablation with this plan" in capsys.readouterr().err


# ---- a real ablation -----------------------------------------------------------------------------------


def final(client: MlflowClient, run_id: str, key: str) -> float:
    history = client.get_metric_history(run_id, key)
    return max(history, key=lambda m: m.step).value


@pytest.fixture(scope="module")
def logged(ablation_store):
    client = MlflowClient(ablation_store.uri)
    experiment = client.get_experiment_by_name(ablation_store.space_name).experiment_id
    parent = client.search_runs([experiment], "tags.stage = 'ablation' and tags.role = 'parent'")[0]
    children = client.search_runs([experiment], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    study = client.search_runs([experiment], "tags.stage = 'tune' and tags.variant = 'full'")
    study_parent = next(r for r in study if "mlflow.parentRunId" not in r.data.tags)
    return client, experiment, parent, children, study_parent


def test_every_cell_is_a_run_named_and_tagged_for_filtering(logged):
    client, _, parent, children, study_parent = logged
    names = sorted(r.info.run_name for r in children)
    # the search trained at seed 0 (base.seed): the cells at the next two seeds, held out from it
    assert names == sorted(f"{v}/seed{s}/alpha={a}" for v in ("full", "fedavg") for s in (1, 2) for a in (0.5, 1.0))
    for run in children:
        tags = run.data.tags
        assert tags["stage"] == "ablation" and tags["role"] == "trial" and tags["trial_status"] == "finished"
        assert run.info.run_name == f"{tags['variant']}/seed{tags['seed']}/{tags['setting']}"
        assert run.data.params["seed"] == tags["seed"]
        assert run.data.params["partition.alpha"] == tags["setting"].removeprefix("alpha=")
        # linked to the study it took its configuration from, and carrying the study's selection
        if tags["variant"] == "full":
            assert tags["study_run_id"] == study_parent.info.run_id
            for name in ("mu", "lambda"):
                assert float(run.data.params[name]) == pytest.approx(float(study_parent.data.tags[f"best.{name}"]))
        else:
            assert tags["study_run_id"] == "none"
    assert parent.data.tags["config_source.fedavg"].startswith("no tuned study")
    assert study_parent.info.run_id in parent.data.tags["config_source.full"]


def test_no_cell_trains_at_a_seed_any_tuning_trial_used_and_mlflow_records_both(logged):
    client, experiment, parent, children, study_parent = logged
    trials = client.search_runs([experiment], f"tags.mlflow.parentRunId = '{study_parent.info.run_id}'")
    searched = {int(run.data.params["seed"]) for run in trials}
    scored = {int(run.data.params["seed"]) for run in children}
    assert len(trials) == 2 and searched == {0} and scored == {1, 2} and not searched & scored
    assert study_parent.data.tags["tuning_seeds"] == "0"
    tags = parent.data.tags
    assert tags["seed_rule"] == "held_out" and tags["tuning_seeds"] == "0" and tags["seeds"] == "1,2"
    assert "searched (tuning): 0; scored here (held out from the search): 1, 2" in tags["mlflow.note.content"]


def test_the_tune_summary_and_the_ablation_say_which_seeds_were_searched_and_which_scored(ablation_store):
    assert (
        "seeds: every trial trained at seed 0 (searched); `ablate` scores at seeds held out from the search (1, 2, 3"
        in (ablation_store.tune_output)
    )
    assert "seeds: training seeds searched (tuning): 0; scored here (held out from the search): 1, 2" in (
        ablation_store.output
    )


def test_the_table_matches_the_logged_metrics(ablation_store, logged):
    client, _, parent, children, _ = logged
    by_cell: dict[tuple[str, str], list[float]] = {}
    for run in children:
        by_cell.setdefault((run.data.tags["variant"], run.data.tags["setting"]), []).append(
            final(client, run.info.run_id, "test_acc")
        )
    assert len(by_cell) == 4 and all(len(v) == 2 for v in by_cell.values())
    results = pd.read_parquet(ablation_store.out / "ablation_results.parquet")
    assert len(results) == 8 and set(results["status"]) == {"finished"}
    for row in results.itertuples():
        assert row.test_acc == final(client, row.run_id, "test_acc")
    table = pd.read_csv(ablation_store.out / "ablation_table.csv", index_col="variant")
    assert list(table.index) == ["full", "fedavg"] and list(table.columns) == ["alpha=0.5", "alpha=1.0"]
    markdown = (ablation_store.out / "ablation_table.md").read_text()
    assert markdown.startswith("Training seeds searched (tuning): 0; scored here (held out from the search): 1, 2.")
    for setting in ("alpha=0.5", "alpha=1.0"):
        means = {v: statistics.mean(by_cell[(v, setting)]) for v in ("full", "fedavg")}
        best = max(means, key=means.get)
        for variant, values in ((v, by_cell[(v, setting)]) for v in ("full", "fedavg")):
            expected = format_cell(statistics.mean(values), statistics.stdev(values), 2, 2)
            assert table.loc[variant, setting] == expected + (" *" if variant == best else "")
            assert (f"**{expected}**" if variant == best else f"| {expected} |") in markdown
            assert not math.isnan(statistics.stdev(values))
    # the parent run keeps the same files
    logged_results = client.download_artifacts(parent.info.run_id, "ablation/results.parquet", str(ablation_store.root))
    pd.testing.assert_frame_equal(pd.read_parquet(logged_results), results)
    assert ablation_results(client, parent.info.experiment_id, parent.info.run_id).shape[0] == 8


def test_each_setting_has_its_partition_on_the_parent(logged):
    client, _, parent, _, _ = logged
    folders = sorted(a.path for a in client.list_artifacts(parent.info.run_id, "partition"))
    assert folders == ["partition/alpha-0.5", "partition/alpha-1.0"]


def test_resume_reruns_only_the_cells_that_did_not_finish(ablation_store, logged, capsys):
    client, experiment, parent, children, _ = logged
    redo = next(r for r in children if r.info.run_name == "fedavg/seed2/alpha=1.0")
    before = final(client, redo.info.run_id, "test_acc")
    client.set_tag(redo.info.run_id, "trial_status", "error")  # as if that trial had failed
    assert ablate([*ablation_store.argv, "--resume", "--no-dashboard", "--verbose"]) == 0
    out = capsys.readouterr().out
    assert "7 of 8 runs had finished" in out and "[ablation] cell 1/1 started: cell=fedavg/seed2/alpha=1.0" in out
    assert "[ablation] cell 1/1 round 3/3 val_acc=" in out  # --verbose: a line per round
    assert "[ablation] done: 1/1 cells ended (1 finished) | " in out
    rerun = client.search_runs(
        [experiment], f"tags.mlflow.parentRunId = '{parent.info.run_id}' and tags.cell = 'fedavg/seed2/alpha=1.0'"
    )
    assert len(rerun) == 2  # the old run is kept, the table uses the finished one: seeded, so the same score
    results = pd.read_parquet(ablation_store.out / "ablation_results.parquet")
    row = results[results["cell"] == "fedavg/seed2/alpha=1.0"].iloc[0]
    assert row["status"] == "finished" and row["run_id"] != redo.info.run_id and row["test_acc"] == before
    assert len(results) == 8


def test_both_stages_use_the_same_param_and_metric_names(logged):
    # the MLflow UI compares runs column by column: a tune trial and an ablation run of one method line up
    client, experiment, _, children, study_parent = logged
    trials = client.search_runs([experiment], f"tags.mlflow.parentRunId = '{study_parent.info.run_id}'")
    trial = next(r for r in trials if r.data.tags["rounds_completed"] == "2")  # the last round adds diagnostics
    cell = next(r for r in children if r.data.tags["variant"] == "full")
    assert set(trial.data.params) == set(cell.data.params)  # both: every resolved hyperparameter
    assert set(trial.data.metrics) == set(cell.data.metrics)


def test_a_tune_trial_and_an_ablation_cell_of_one_configuration_log_the_same_params():
    from raytune_fl.config import VariantTrials
    from raytune_fl.methods import METHODS
    from raytune_fl.tracking.records import TuneTrials, ablation_cell

    s = parse_space(
        {
            **tiny_space(),
            "variants": {
                "full": {"method": "univarfl", "fixed": {"eps": 0.02}, "search": {"mu": {"loguniform": [0.01, 1.0]}}}
            },
        }
    )
    variant, sampled = s.variants["full"], {"mu": 0.25}  # what Tune's searcher drew for one trial
    trial = TuneTrials("full", VariantTrials.of(s, "full")).record(sampled, 0).params
    # the ablation reads that trial back as its study's selection (derived defaults come back as their rule)
    selected = METHODS.get("univarfl").describe({**variant.fixed, **sampled})
    source = variant_source(s, "full", StudyRecord("run1", "univarfl", selected, {"best_val_acc": 0.5}, 0))
    cell = make_plan(s, [], [s.base.seed], {"full": source}).cells[0]
    assert ablation_cell(cell, source.note).params == trial
    # every hyperparameter, resolved: the searched and fixed ones, the defaults, a derived default as its rule
    assert {k: trial[k] for k in ("method", "mu", "eps", "lambda", "include_diagonal")} == {
        "method": "univarfl",
        "mu": 0.25,
        "eps": 0.02,
        "lambda": "D/4",
        "include_diagonal": False,
    }
