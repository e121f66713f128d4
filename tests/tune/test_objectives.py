"""Several objectives: tune.metric as a list, Optuna's multi-objective search, the Pareto front (tune/selection.py)
in the outcome, the summary and MLflow's tags."""

from __future__ import annotations

import math

import optuna
import pytest
from ray.tune.schedulers import FIFOScheduler

from raytune_fl.config import ConfigError, Objective, TuneSettings, parse_space
from raytune_fl.report.dashboard import build_dashboard
from raytune_fl.tune.search import make_search, objective_args
from raytune_fl.tune.selection import dominates, pareto_front
from tests.support import run_study, tiny_space


def _space(metric, **tune):
    data = tiny_space()
    data["tune"] = {**data["tune"], "metric": metric, **tune}
    return parse_space(data)


def test_one_metric_as_before_and_a_list_with_or_without_directions():
    assert TuneSettings().objectives == (Objective("val_acc", "max"),)
    assert TuneSettings(metric="val_loss").mode == "min"
    metric = [{"val_acc": "max"}, "client_acc_var", {"client_acc_worst": "min"}]
    with pytest.raises(ValueError, match=r"\[client_acc_worst: min\] minimises"):  # against its sense, not opted out
        TuneSettings(metric=metric)
    settings = TuneSettings(metric=metric, against_sense=["client_acc_worst"])
    assert settings.objectives == (
        Objective("val_acc", "max"),
        Objective("client_acc_var", "min"),  # its own direction: a variance is better low
        Objective("client_acc_worst", "min"),  # as written, against its sense on purpose
    )
    assert settings.multi_objective and settings.primary == "val_acc" and settings.mode == "max"


@pytest.mark.parametrize(
    ("metric", "message"),
    [
        ("test_acc", "test set never steers tuning"),
        ([{"val_acc": "max"}, {"test_loss": "min"}], "test set never steers tuning"),
        (["val_acc", "client_acc_worts"], "did you mean 'client_acc_worst'"),
        (["val_acc", "val_acc"], "'val_acc' is listed twice"),
        ([], "name at least one metric"),
        ([{"val_acc": "max", "val_loss": "min"}], "one metric per entry"),
        ([{"val_acc": "up"}], "tune.metric"),
    ],
)
def test_a_bad_metric_is_refused_naming_the_field(metric, message):
    with pytest.raises(ConfigError, match="tune.metric") as error:
        _space(metric)
    assert message in str(error.value)


def test_asha_gives_way_to_several_objectives_unless_the_file_asks_for_it():
    data = tiny_space()
    data["tune"] = {"num_samples": 4, "metric": ["val_acc", "client_acc_worst"]}  # the default scheduler
    space = parse_space(data)
    assert space.tune.early_stopping is None
    search = make_search(space, "full", "stamp")
    assert isinstance(search.scheduler, FIFOScheduler) and not search.may_stop_early
    assert objective_args(space.tune) == (["val_acc", "client_acc_worst"], ["max", "max"])
    with pytest.raises(ConfigError, match=r"tune.scheduler.asha: ASHA stops trials by one number"):
        _space(["val_acc", "client_acc_worst"], scheduler={"asha": {"grace_period": 1}})
    assert _space("val_acc").tune.early_stopping is not None  # one objective: ASHA as before


def test_a_client_spread_objective_needs_the_client_accuracy_diagnostic():
    data = tiny_space()
    data["base"]["diagnostics"] = {"client_accuracy": False}
    data["tune"] = {"metric": ["val_acc", "client_acc_worst"]}
    with pytest.raises(ConfigError, match="tune.metric: client_acc_worst is measured by base.diagnostics"):
        parse_space(data)


def test_the_pareto_front_by_hand():
    # maximise the first, minimise the second
    points = [(0.5, 0.1), (0.6, 0.2), (0.4, 0.05), (0.5, 0.3), (math.nan, 0.0), (0.6, 0.2), (0.3, 0.05)]
    # (0.5, 0.3) is beaten by (0.5, 0.1); (0.3, 0.05) by (0.4, 0.05); NaN never counts; equal points both stay
    assert pareto_front(points, [True, False]) == [0, 1, 2, 5]
    assert dominates((0.5, 0.1), (0.5, 0.3), [True, False]) and not dominates((0.6, 0.2), (0.6, 0.2), [True, False])
    assert pareto_front([(1.0, 1.0)], [True, True]) == [0] and pareto_front([], [True]) == []


def _front_by_hand(rows: list[tuple[str, float, float]]) -> set[str]:
    """Run ids no other row beats: val_acc higher-or-equal and variance lower-or-equal, one strictly."""
    return {
        run for run, acc, var in rows if not any(a >= acc and v <= var and (a > acc or v < var) for _, a, v in rows)
    }


def test_a_two_objective_study_tags_its_front_and_selects_the_fronts_best_first_objective(
    ray_cluster, tmp_path, capsys
):
    data = tiny_space("fair")
    data["base"].update(rounds=2, resources={"actors": 0, "cpus_per_actor": 1})
    data["variants"] = {"qffl": {"method": "qffl", "search": {"q": {"loguniform": [0.01, 10.0]}}}}
    data["tune"] = {"num_samples": 5, "metric": [{"val_acc": "max"}, {"client_acc_var": "min"}], "seed": 0}
    client, runs = run_study(tmp_path, data)
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    assert len(children) == 5 and all(r.data.tags["trial_status"] == "finished" for r in children)  # no ASHA
    rows = [(r.info.run_id, r.data.metrics["val_acc"], r.data.metrics["client_acc_var"]) for r in children]
    tagged = {r.info.run_id for r in children if r.data.tags.get("pareto_front") == "true"}
    assert tagged == _front_by_hand(rows) and tagged
    selected = max((r for r in children if r.info.run_id in tagged), key=lambda r: r.data.metrics["val_acc"])
    assert float(parent.data.tags["best.q"]) == pytest.approx(float(selected.data.params["q"]))
    assert parent.data.tags["objectives"] == "val_acc:max,client_acc_var:min"
    study = optuna.load_study(study_name="fair-qffl", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    assert study.directions == [optuna.study.StudyDirection.MAXIMIZE, optuna.study.StudyDirection.MINIMIZE]
    out = capsys.readouterr().out
    assert "Pareto front per variant over val_acc (max), client_acc_var (min)" in out
    assert f"qffl: {len(tagged)} trial{'s' if len(tagged) != 1 else ''} on the front" in out
    assert out.count("  [q=") == len(tagged)

    # the dashboard draws the same front from the tags
    report = build_dashboard(f"sqlite:///{tmp_path / 'm.db'}", parse_space(data), tmp_path / "d.html", False)
    assert "pareto-front" in report.rendered
    page = (tmp_path / "d.html").read_text()
    assert f"{len(tagged)} of 5 completed trials on the Pareto front" in page
    assert "final val_acc against client_acc_var per trial" in page
