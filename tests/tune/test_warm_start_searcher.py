"""Warm starts in the searcher and the tune command: the enqueued configurations proposed first and never twice
(a restored searcher, a resumed Optuna storage), each study's points taken from its source when it starts, an MLflow
source refused before anything is written, the summary's line. These import Ray (tune/search.py, cli/tune.py)."""

from __future__ import annotations

import pickle

import optuna
import pytest

from raytune_fl.cli.tune import VariantStudy, _warm_line, _warm_points, _warm_started, print_summary
from raytune_fl.config import ConfigError, SearchSpace, parse_space
from raytune_fl.tune.outcome import VariantOutcome
from raytune_fl.tune.search import Resumed, make_search
from raytune_fl.tune.warm_start import WarmPoints
from tests.support import tiny_space


def _space(**tune) -> SearchSpace:
    """Two variants searching mu (prox, prox2: a narrower range); `tune` changes tune's settings."""
    data = tiny_space("warm")
    data["variants"] = {
        "prox": {"method": "fedprox", "search": {"mu": {"loguniform": [0.001, 1.0]}}},
        "prox2": {"method": "fedprox", "search": {"mu": {"loguniform": [0.01, 0.5]}}},
    }
    data["tune"] = {**data["tune"], "num_samples": 4, **tune}
    return parse_space(data)


# ------------------------------------------------------------------ the searcher: enqueued first, once


def _proposed(searcher, n: int, start: int = 0) -> list[dict]:
    return [searcher.suggest(f"t{i}") for i in range(start, start + n)]


def test_the_searcher_proposes_the_enqueued_configurations_first_then_samples():
    points = ({"mu": 0.123}, {"mu": 0.0456})
    search = make_search(_space(), "prox", "stamp", warm_start=points)
    proposed = _proposed(search.algorithm, 4)
    assert proposed[:2] == list(points)
    assert all(p not in points for p in proposed[2:])
    cold = make_search(_space(), "prox", "stamp")
    assert _proposed(cold.algorithm, 2) != list(points)


def test_a_restored_searcher_never_proposes_an_enqueued_configuration_twice(tmp_path):
    """Tune restores the searcher it saved (its __dict__, pickled): the configurations it had proposed are gone
    from its queue, the others still wait in it."""
    points = ({"mu": 0.123}, {"mu": 0.0456})
    searcher = make_search(_space(), "prox", "stamp", warm_start=points).algorithm
    assert searcher.suggest("t0") == points[0]
    searcher.save(str(tmp_path / "searcher.pkl"))
    restored = pickle.loads(pickle.dumps(make_search(_space(), "prox", "other", resumed=Resumed(None)).algorithm))
    restored.restore(str(tmp_path / "searcher.pkl"))
    assert restored.suggest("t1") == points[1]
    assert all(restored.suggest(f"t{i}") not in points for i in range(2, 5))


def test_a_resume_does_not_enqueue_again_into_its_optuna_storage(tmp_path):
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    points = ({"mu": 0.123}, {"mu": 0.0456})
    first = make_search(_space(), "prox", "s1", url, warm_start=points)
    study = optuna.load_study(study_name=first.optuna_study, storage=url)
    waiting = study.get_trials(states=[optuna.trial.TrialState.WAITING])
    assert [t.system_attrs["fixed_params"] for t in waiting] == list(points)  # enqueue_trial's
    make_search(_space(), "prox", "s2", url, resumed=Resumed(first.optuna_study), warm_start=points)
    assert len(study.get_trials()) == 2  # still the two it enqueued first


# ------------------------------------------------------------------ the tune command: each study's points


def test_each_study_takes_its_sources_top_when_it_starts_and_refuses_one_that_does_not_fit(tmp_path):
    space = _space(warm_start={"from": "prox", "top": 2})
    unplanned = [VariantStudy(variant, None, space, data=None) for variant in ("prox", "prox2")]  # no data needed
    studies = _warm_started(space, unplanned, "unused")
    assert studies[0].warm_start is None and studies[1].warm_start is not None

    def ran(ranked: list[dict]) -> VariantOutcome:
        return VariantOutcome("prox", "fedprox", {}, {}, {}, "run1", "", 1.0, ranked=ranked)

    points = _warm_points(studies[1], [ran([{"mu": 0.3}, {"mu": 0.02}, {"mu": 0.1}])])
    assert points == WarmPoints("variant prox", ({"mu": 0.3}, {"mu": 0.02}), "run1")
    assert _warm_points(studies[1], [ran([])]) == WarmPoints("variant prox", (), "run1")  # nothing finished: cold
    with pytest.raises(ConfigError) as caught:  # prox2 searches mu in [0.01, 0.5]
        _warm_points(studies[1], [ran([{"mu": 0.9}])])
    assert "tune.warm_start.from: variant prox tried mu=0.9, outside the loguniform [0.01, 0.5] study 'prox2'" in str(
        caught.value
    )


def test_a_missing_mlflow_store_is_refused_before_anything_is_written(tmp_path, capsys):
    import yaml

    from raytune_fl.cli import main

    data = tiny_space("warm")
    data["variants"] = {"prox": {"method": "fedprox", "search": {"mu": {"loguniform": [0.001, 1.0]}}}}
    data["tune"]["warm_start"] = {"from": "mlflow:abc"}
    path = tmp_path / "warm.yaml"
    path.write_text(yaml.safe_dump(data))
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    assert main(["--space", str(path), "--mlflow-uri", uri, "--storage", str(tmp_path / "ray")]) == 2
    assert "tune.warm_start.from: no MLflow store at" in capsys.readouterr().err
    assert not (tmp_path / "m.db").exists() and not (tmp_path / "ray").exists()


def test_the_summary_says_which_studies_were_warm_started(capsys):
    def outcome(setting: str, warm: str) -> VariantOutcome:
        metrics = {"val_acc": 0.5, "test_acc": 0.5, "round": 2.0}
        return VariantOutcome(
            "prox", "fedprox", {"mu": 0.1}, metrics, {"finished": 2}, None, "", 1.0, setting=setting, warm_start=warm
        )

    outcomes = [outcome("partition.alpha=0.1", ""), outcome("partition.alpha=0.5", "2 configurations from x")]
    print_summary(outcomes, "sqlite:///m.db", "warm", 1.0)
    out = capsys.readouterr().out
    assert "[prox@partition.alpha=0.5] warm-started with 2 configurations from x" in out
    assert out.count("warm-started") == 1
    assert _warm_line("k", "", "a=1") == "[k] warm start: a=1 has no trial that ran every round; it starts cold"


def test_a_finished_study_kept_by_the_study_record_still_gives_its_ranked_configurations(tmp_path):
    """--resume keeps a finished source study from the study record: a study after it is warm-started alike."""
    from raytune_fl.tune.manifest import StudyManifest

    space = _space()
    manifest = StudyManifest.start(tmp_path, space, "sqlite:///m.db")
    ranked = [{"mu": 0.3}, {"mu": 0.02}]
    outcome = VariantOutcome("prox", "fedprox", {}, {}, {}, "run1", "", 1.0, ranked=ranked, warm_start="2 from x")
    manifest.finished("prox@a=1", outcome)
    kept = StudyManifest.load(tmp_path, space, "sqlite:///m.db").outcome("prox@a=1")
    assert kept is not None and kept.ranked == ranked and kept.warm_start == "2 from x"
