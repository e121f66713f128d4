"""Tuning and ablating on personal scores: tune.metric personal_val_acc only where every variant's clients have
models of their own; ablate.py --metric on each client's own test part only where there is one."""

from __future__ import annotations

import pytest

from raytune_fl.cli.ablate import _check_metric
from raytune_fl.config import ConfigError, ExperimentConfig, parse_space
from raytune_fl.metrics import CLIENT_TEST_ACC, PERSONAL_TEST_ACC, PERSONAL_VAL_ACC, TABLE_METRICS, TEST_ACC
from tests.support import tiny_space


def _space(variants: dict, **base) -> dict:
    data = tiny_space(**base)
    data["variants"] = variants
    data["tune"] = {**data["tune"], "metric": PERSONAL_VAL_ACC}
    return data


def _first_line(data: dict) -> str:
    with pytest.raises(ConfigError) as error:
        parse_space(data)
    return str(error.value).splitlines()[0]


def test_personal_val_acc_is_tuned_on_where_the_clients_have_models_of_their_own():
    space = parse_space(_space({"bn": {"method": "fedbn"}, "pac": {"method": "fedpac"}}))
    assert space.tune.primary == PERSONAL_VAL_ACC and space.tune.mode == "max"


def test_a_space_of_global_variants_alone_is_refused_naming_them_and_the_way_out():
    line = _first_line(_space({"avg": {"method": "fedavg"}, "plain": {"method": "fedpac", "fixed": {"mix": False}}}))
    assert line.startswith("tune.metric: personal_val_acc") and "no variant personalises" in line
    assert "avg: fedavg uses the global model; plain: fedpac uses the global model" in line
    assert "tune on val_acc" in line and "base.personalise.finetune_steps" in line


def test_a_global_row_beside_personalised_ones_is_tuned_on_the_same_metric():
    space = parse_space(_space({"bn": {"method": "fedbn"}, "avg": {"method": "fedavg"}}))
    assert space.tune.primary == PERSONAL_VAL_ACC


def test_fine_tuning_at_evaluation_gives_a_global_method_personal_models():
    space = parse_space(_space({"avg": {"method": "fedavg"}}, personalise={"finetune_steps": 5}))
    assert space.variants["avg"].method == "fedavg"


def test_fedpac_personalises_only_with_its_mix_and_a_searched_mix_may():
    assert "plain: fedpac" in _first_line(_space({"plain": {"method": "fedpac", "fixed": {"mix": False}}}))
    parse_space(_space({"pac": {"method": "fedpac", "search": {"mix": {"choice": [True, False]}}}}))


def test_another_metric_is_not_checked_for_personal_models():
    data = _space({"avg": {"method": "fedavg"}})
    data["tune"]["metric"] = "val_acc"
    assert parse_space(data).tune.primary == "val_acc"


def test_the_table_metrics_are_never_tuning_objectives():
    for metric in (PERSONAL_TEST_ACC, CLIENT_TEST_ACC):
        data = _space({"bn": {"method": "fedbn"}})
        data["tune"]["metric"] = metric
        assert f"unknown metric {metric!r}" in _first_line(data)


def test_a_table_on_each_clients_test_part_needs_one_in_every_setting():
    with_part = ExperimentConfig.model_validate(
        {"partition": {"kind": "dirichlet", "alpha": 0.5, "clients": 3, "val_fraction": 0.1, "test_fraction": 0.2}}
    )
    without = ExperimentConfig()
    assert TABLE_METRICS[0] == TEST_ACC
    _check_metric(TEST_ACC, {"a": without})  # the global test set needs nothing
    _check_metric(PERSONAL_TEST_ACC, {"a": with_part})
    with pytest.raises(ConfigError) as error:
        _check_metric(PERSONAL_TEST_ACC, {"alpha=0.1": with_part, "alpha=1": without})
    line = str(error.value).splitlines()[0]
    assert line.startswith("--metric personal_test_acc:") and "test_fraction is 0 (setting alpha=1)" in line


def test_a_variant_fixes_its_own_fine_tuning_beside_a_global_row():
    variants = {
        "avg_ft": {"method": "fedavg", "fixed": {"personalise.finetune_steps": 5}},
        "bn": {"method": "fedbn"},
    }
    space = parse_space(_space(variants))
    from raytune_fl.config import TrialSpec

    spec = TrialSpec.resolve(space.base, "fedavg", space.variants["avg_ft"].fixed)
    assert spec.experiment.personalise.finetune_steps == 5 and spec.params == {}
    assert space.base.personalise.finetune_steps == 0  # the other rows keep base's
    assert "avg: fedavg uses the global model" in _first_line(_space({"avg": {"method": "fedavg"}}))


def test_personal_against_global_accuracy_is_a_two_objective_search():
    data = _space({"ditto": {"method": "ditto", "search": {"lambda": {"loguniform": [0.01, 2.0]}}}})
    data["tune"]["metric"] = [{PERSONAL_VAL_ACC: "max"}, {"val_acc": "max"}]
    data["tune"]["scheduler"] = {}
    tune = parse_space(data).tune
    assert [str(o) for o in tune.objectives] == ["personal_val_acc (max)", "val_acc (max)"] and tune.multi_objective
