"""Warm starts (tune/warm_start.py, tune.warm_start): the top of a source study, fitted to a variant's ranges and tried
first; planned before any study runs, refused where the source runs later or does not fit, never enqueued twice by
a resume, and recorded in MLflow. Plain Python and MLflow: the searcher and the tune command's part are in
test_warm_start_searcher.py, the real study in test_per_setting.py."""

from __future__ import annotations

import math

import pytest
from mlflow.tracking import MlflowClient

from raytune_fl.config import ConfigError, Distribution, SearchSpace, WarmStart, parse_space
from raytune_fl.tracking.records import TuneTrials, tune_parent, tune_trial, with_warm_start
from raytune_fl.tracking.schema import TAG_WARM_START, TAG_WARM_START_CONFIGS, decode_value
from raytune_fl.tune.warm_start import WarmPlan, WarmPoints, fitted, from_mlflow, plan, ranked_configs
from tests.support import tiny_space


def _space(**tune) -> SearchSpace:
    """Two variants searching mu (fedprox, prox2) and one searching nothing; `tune` changes tune's settings."""
    data = tiny_space("warm")
    data["variants"] = {
        "prox": {"method": "fedprox", "search": {"mu": {"loguniform": [0.001, 1.0]}}},
        "prox2": {"method": "fedprox", "search": {"mu": {"loguniform": [0.01, 0.5]}}},
        "fedavg": {"method": "fedavg"},
    }
    data["tune"] = {**data["tune"], "num_samples": 4, **tune}
    return parse_space(data)


def _refusal(data: dict) -> str:
    with pytest.raises(ValueError) as caught:
        parse_space(data)
    return str(caught.value)


# ------------------------------------------------------------------ ranking a study's trials


def test_the_finished_trials_rank_best_first_by_the_metric_and_its_direction():
    candidates = [
        (True, 0.5, {"mu": 0.1}),
        (False, 0.99, {"mu": 0.2}),  # stopped early: its score is not a final one
        (True, 0.7, {"mu": 0.3}),
        (True, math.nan, {"mu": 0.4}),
        (True, 0.7, {"mu": 0.5}),  # a tie keeps the earlier trial first
        (True, 0.2, {"mu": 0.6}),
    ]
    assert ranked_configs(candidates, maximize=True) == [{"mu": 0.3}, {"mu": 0.5}, {"mu": 0.1}, {"mu": 0.6}]
    assert ranked_configs(candidates, maximize=False)[:2] == [{"mu": 0.6}, {"mu": 0.1}]
    assert ranked_configs([], maximize=True) == []


# ------------------------------------------------------------------ the setting


def test_the_setting_reads_from_as_written_and_defaults_to_the_previous_settings_two_best():
    assert WarmStart.model_validate({"from": "prox", "top": 3}).variant == "prox"
    default = _space().tune.warm_start
    assert default is not None and (default.source, default.top, default.variant) == ("previous_setting", 2, None)
    assert WarmStart.model_validate({"from": "mlflow:abc"}).mlflow_run == "abc"
    assert _space(warm_start=None).warm_start_for("prox") == (None, "tune.warm_start")
    assert _space(warm_start={"top": 0}).warm_start_for("prox")[0] is None  # top 0: off
    dumped = _space(warm_start={"from": "prox"}).tune.model_dump(mode="json")["warm_start"]
    assert WarmStart.model_validate(dumped).source == "prox"  # config.yaml's dump reads back


def test_a_variants_own_warm_start_replaces_tunes():
    data = tiny_space("warm")
    data["variants"] = {
        "prox": {"method": "fedprox", "search": {"mu": {"loguniform": [0.001, 1.0]}}},
        "prox2": {
            "method": "fedprox",
            "search": {"mu": {"loguniform": [0.01, 0.5]}},
            "warm_start": {"from": "prox", "top": 1},
        },
    }
    space = parse_space(data)
    own, field = space.warm_start_for("prox2")
    assert own is not None and (own.variant, own.top, field) == ("prox", 1, "variants.prox2.warm_start")
    assert space.warm_start_for("prox")[1] == "tune.warm_start"


@pytest.mark.parametrize(
    ("where", "warm_start", "fragments"),
    [
        ("tune", {"from": "proxx"}, ["warm_start.from", "'proxx' is no variant", "did you mean 'prox'"]),
        ("prox", {"from": "prox"}, ["variants.prox.warm_start.from", "cannot warm-start from itself"]),
        ("tune", {"from": "full"}, ["tune.warm_start.from", "'full' searches lambda, mu", "'prox' searches mu"]),
        ("tune", {"from": "mlflow:"}, ["warm_start.from", "needs the study's parent run id"]),
        ("tune", {"from": "prox", "top": -1}, ["warm_start.top"]),
    ],
)
def test_a_source_that_cannot_serve_is_refused_naming_the_field(where, warm_start, fragments):
    data = tiny_space("warm")
    data["variants"]["prox"] = {"method": "fedprox", "search": {"mu": {"loguniform": [0.001, 1.0]}}}
    if where == "tune":
        data["tune"]["warm_start"] = warm_start
    else:
        data["variants"][where]["warm_start"] = warm_start
    text = _refusal(data)
    for fragment in fragments:
        assert fragment in text, text


# ------------------------------------------------------------------ the plan: the source runs first


def test_per_setting_each_setting_after_the_first_starts_from_the_previous_one():
    space = _space()
    studies = [(v, s) for s in ("a=1", "a=2", "a=3") for v in ("prox", "fedavg")]
    plans = plan(space, studies)
    assert set(plans) == {"prox@a=2", "prox@a=3"}  # the first setting starts cold; fedavg searches nothing
    assert plans["prox@a=3"] == WarmPlan("tune.warm_start", 2, "prox@a=2", "a=2")
    assert plan(space, [("prox", None), ("prox2", None)]) == {}  # no --per-setting: no previous setting
    assert plan(_space(warm_start=None), studies) == {}
    assert plan(_space(warm_start={"top": 0}), studies) == {}


def test_a_variant_source_must_run_first():
    space = _space(warm_start={"from": "prox", "top": 1})
    plans = plan(space, [("prox", None), ("prox2", None)])
    assert plans == {"prox2": WarmPlan("tune.warm_start", 1, "prox", "variant prox")}  # prox itself: cold
    with pytest.raises(ConfigError, match=r"tune.warm_start.from: variant 'prox' is tuned after 'prox2'"):
        plan(space, [("prox2", None), ("prox", None)])
    with pytest.raises(ConfigError, match=r"tune.warm_start.from: variant 'prox' is not tuned in this run"):
        plan(space, [("prox2", None)])
    per_setting = plan(space, [("prox", "a=1"), ("prox2", "a=1"), ("prox", "a=2"), ("prox2", "a=2")])
    assert per_setting["prox2@a=2"].study == "prox@a=2"  # the same setting's study of the source


def test_an_mlflow_source_is_planned_for_each_searched_variant():
    plans = plan(_space(warm_start={"from": "mlflow:r1", "top": 3}), [("prox", None), ("fedavg", None)])
    assert plans == {"prox": WarmPlan("tune.warm_start", 3, None, "MLflow run r1", "r1")}


# ------------------------------------------------------------------ fitting to the variant's ranges


_PLAN = WarmPlan("tune.warm_start", 2, "prox@a=1", "a=1")


def test_configurations_are_fitted_to_the_variants_search():
    search = _space().variants["prox"].search
    points = fitted(WarmPoints("a=1", ({"mu": 0.5}, {"mu": 1})), search, _PLAN, "prox@a=2")
    assert points.configs == ({"mu": 0.5}, {"mu": 1.0}) and isinstance(points.configs[1]["mu"], float)
    choices = {"mu": Distribution(choice=[0.1, 1, "x"]), "lambda": Distribution(int=(1, 3))}
    points = fitted(WarmPoints("a=1", ({"mu": 1, "lambda": 2.0},)), choices, _PLAN, "full")
    assert points.configs == ({"mu": 1, "lambda": 2},) and isinstance(points.configs[0]["lambda"], int)


@pytest.mark.parametrize(
    ("config", "fragments"),
    [
        ({"mu": 2.0}, ["tune.warm_start.from: a=1 tried mu=2.0", "loguniform [0.001, 1.0]", "'prox@a=2'"]),
        ({"mu": "big"}, ["tried mu='big'"]),
        ({"mu": True}, ["tried mu=True"]),
        ({"mu": 0.1, "lambda": 1.0}, ["a=1 searched lambda, mu", "study 'prox@a=2' searches mu", "do not fit"]),
    ],
)
def test_a_configuration_that_does_not_fit_is_refused_naming_the_study_and_the_hyperparameter(config, fragments):
    with pytest.raises(ConfigError) as caught:
        fitted(WarmPoints("a=1", (config,)), _space().variants["prox"].search, _PLAN, "prox@a=2")
    for fragment in fragments:
        assert fragment in str(caught.value)


def test_a_choice_is_matched_by_its_encoding():
    search = {"mu": Distribution(choice=[1.0, 2.0]), "lambda": Distribution(int=(1, 3))}
    with pytest.raises(ConfigError, match="tried mu=1,"):  # 1 is not the choice 1.0 (Optuna tells them apart)
        fitted(WarmPoints("a=1", ({"mu": 1, "lambda": 2},)), search, _PLAN, "full")
    with pytest.raises(ConfigError, match=r"tried lambda=1.5, outside the int \[1, 3\]"):
        fitted(WarmPoints("a=1", ({"mu": 1.0, "lambda": 1.5},)), search, _PLAN, "full")


# ------------------------------------------------------------------ MLflow: a source study, and the record


def _logged_study(client: MlflowClient, experiment: str, trials: list[tuple[str, float, str]], **tags) -> str:
    """A tune parent searching mu and its trial runs (mu as the params codec writes it, val_acc, status)."""
    parent = client.create_run(experiment, tags={"stage": "tune", "searched": "mu", **tags}).info.run_id
    for mu, val_acc, status in trials:
        run = client.create_run(
            experiment, tags={"mlflow.parentRunId": parent, "stage": "tune", "trial_status": status}
        ).info.run_id
        client.log_param(run, "mu", mu)
        client.log_metric(run, "val_acc", 0.1, step=1)
        client.log_metric(run, "val_acc", val_acc, step=2)  # the last round's value is the one that ranks
    return parent


def test_an_mlflow_study_gives_its_best_finished_configurations(tmp_path):
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("earlier")
    trials = [("0.01", 0.6, "finished"), ("0.5", 0.9, "stopped_early"), ("0.2", 0.8, "finished")]
    parent = _logged_study(client, experiment, [*trials, ("0.05", 0.7, "collapsed")])
    search = _space().variants["prox"].search
    warm = WarmPlan("tune.warm_start", 2, None, f"MLflow run {parent}", parent)
    points = from_mlflow(uri, warm, search, "prox", "val_acc", maximize=True)
    assert points.configs == ({"mu": 0.2}, {"mu": 0.05}) and points.run_id == parent
    narrow = _space().variants["prox2"].search  # mu in [0.01, 0.5]: 0.2 and 0.05 fit, top 3 adds 0.01
    assert from_mlflow(uri, WarmPlan("f", 3, None, "s", parent), narrow, "prox2", "val_acc", True).configs[2] == {
        "mu": 0.01
    }

    other = _logged_study(client, experiment, [("2.0", 0.9, "finished")])
    with pytest.raises(ConfigError, match=r"tune.warm_start.from: .* tried mu=2.0, outside"):
        from_mlflow(uri, WarmPlan("tune.warm_start", 2, None, "s", other), search, "prox", "val_acc", True)
    lambda_study = client.create_run(experiment, tags={"stage": "tune", "searched": "lambda,mu"}).info.run_id
    with pytest.raises(ConfigError, match="searched lambda, mu, study 'prox' searches mu"):
        from_mlflow(uri, WarmPlan("tune.warm_start", 2, None, "s", lambda_study), search, "prox", "val_acc", True)
    ablation = client.create_run(experiment, tags={"stage": "ablation"}).info.run_id
    with pytest.raises(ConfigError, match="is not a tune study's parent run"):
        from_mlflow(uri, WarmPlan("tune.warm_start", 2, None, "s", ablation), search, "prox", "val_acc", True)
    with pytest.raises(ConfigError, match="tune.warm_start.from: no MLflow run nope"):
        from_mlflow(uri, WarmPlan("tune.warm_start", 2, None, "s", "nope"), search, "prox", "val_acc", True)


def test_the_warm_start_is_recorded_on_the_parent_and_its_enqueued_trials():
    space = _space()
    points = WarmPoints("partition.alpha=0.1", ({"mu": 0.1}, {"mu": 0.2}), "run1")
    tags = with_warm_start(tune_parent(space, "prox", 4), points).tags
    assert tags[TAG_WARM_START] == "2 configurations from partition.alpha=0.1 (MLflow run run1)"
    assert decode_value(tags[TAG_WARM_START_CONFIGS]) == [{"mu": 0.1}, {"mu": 0.2}]
    assert TAG_WARM_START not in tune_parent(space, "prox", 4).tags
    assert TAG_WARM_START not in with_warm_start(tune_parent(space, "prox", 4), WarmPoints("x", ())).tags
    from raytune_fl.config import VariantTrials

    records = TuneTrials("prox", VariantTrials.of(space, "prox"), enqueued=points.configs)
    assert records.record({"mu": 0.2}, 1).tags[TAG_WARM_START] == "enqueued"
    assert TAG_WARM_START not in records.record({"mu": 0.3}, 1).tags  # the sampler's
    assert TAG_WARM_START not in records.record({"mu": 0.1}, 2).tags  # a later draw of the same values
    trial = VariantTrials.of(space, "prox").trial({"mu": 0.1})
    assert TAG_WARM_START not in tune_trial("prox", trial, {"mu": 0.1}, 0).tags
