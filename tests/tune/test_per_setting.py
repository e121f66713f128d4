"""tune --per-setting: a study per variant and grid setting; ablate --grid ... --per-setting runs each setting with
its own selection, and without the flag never mistakes a per-setting study for the variant's own."""

from __future__ import annotations

import json

import pytest
import yaml
from mlflow.tracking import MlflowClient

from raytune_fl.cli import ablate, main
from tests.support import tiny_space


def _space(tmp_path):
    data = tiny_space("persetting")
    data["base"].update(rounds=2, resources={"actors": 0, "cpus_per_actor": 1})
    data["variants"] = {"prox": {"method": "fedprox", "search": {"mu": {"loguniform": [0.001, 1.0]}}}}
    data["tune"] = {"num_samples": 2, "scheduler": {"asha": None}, "seed": 0}
    path = tmp_path / "persetting.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_study_per_setting_and_an_ablation_that_runs_each_settings_own_selection(ray_cluster, tmp_path, capsys):
    space, uri = _space(tmp_path), f"sqlite:///{tmp_path / 'm.db'}"
    common = ["--space", str(space), "--mlflow-uri", uri, "--no-models"]
    assert main([*common, "--storage", str(tmp_path / "ray"), "--per-setting", "alpha=0.3,5.0"]) == 0
    out = capsys.readouterr().out
    assert "data at partition.alpha=0.3: 3 clients" in out and "data at partition.alpha=5.0: 3 clients" in out
    assert "--- tuned at partition.alpha=0.3 ---" in out and "--- tuned at partition.alpha=5.0 ---" in out
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("persetting").experiment_id])
    parents = {
        r.data.tags["setting"]: r
        for r in runs
        if r.data.tags.get("stage") == "tune" and "mlflow.parentRunId" not in r.data.tags
    }
    assert set(parents) == {"partition.alpha=0.3", "partition.alpha=5.0"}
    assert {p.info.run_name for p in parents.values()} == {"prox@partition.alpha=0.3", "prox@partition.alpha=5.0"}
    assert {p.data.tags["partition"] for p in parents.values()} == {"dirichlet(alpha=0.3)", "dirichlet(alpha=5.0)"}
    tuned = {setting: float(p.data.tags["best.mu"]) for setting, p in parents.items()}

    # the second setting's study is warm-started (by default) with the first's two best configurations: its first
    # trials try them, best first, tagged so; its parent run and the summary say so
    def trials(setting):
        parent = parents[setting].info.run_id
        children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent]
        return sorted(children, key=lambda r: r.info.start_time)

    first = sorted(trials("partition.alpha=0.3"), key=lambda r: -r.data.metrics["val_acc"])
    best_first = [float(r.data.params["mu"]) for r in first if r.data.tags["trial_status"] == "finished"][:2]
    warmed = trials("partition.alpha=5.0")
    assert len(best_first) == 2 and [float(r.data.params["mu"]) for r in warmed[:2]] == best_first
    assert [r.data.tags.get("warm_start") for r in warmed] == ["enqueued", "enqueued"]
    assert not any("warm_start" in r.data.tags for r in trials("partition.alpha=0.3"))
    tags = parents["partition.alpha=5.0"].data.tags
    assert tags["warm_start"].startswith("2 configurations from partition.alpha=0.3 (MLflow run ")
    assert [c["mu"] for c in json.loads(tags["warm_start_configs"])] == best_first
    assert "[prox@partition.alpha=5.0] warm-started with 2 configurations from partition.alpha=0.3" in out
    assert "warm_start" not in parents["partition.alpha=0.3"].data.tags

    # the ablation: each setting's cells run that setting's mu (the grid written with the short name)
    ablation = [*common[:4], "--seeds", "1", "--no-dashboard", "--out", str(tmp_path / "report")]
    assert ablate.main([*ablation, "--grid", "alpha=0.3,5.0", "--per-setting"]) == 0
    runs = client.search_runs([client.get_experiment_by_name("persetting").experiment_id], "tags.stage = 'ablation'")
    cells = {r.data.tags["setting"]: r for r in runs if r.data.tags.get("setting") in ("alpha=0.3", "alpha=5.0")}
    assert float(cells["alpha=0.3"].data.params["mu"]) == pytest.approx(tuned["partition.alpha=0.3"])
    assert float(cells["alpha=5.0"].data.params["mu"]) == pytest.approx(tuned["partition.alpha=5.0"])
    assert cells["alpha=0.3"].data.tags["study_run_id"] == parents["partition.alpha=0.3"].info.run_id

    # without the flag a per-setting study is not the variant's own study: the YAML's values, said so
    capsys.readouterr()
    assert ablate.main([*ablation[:-1], str(tmp_path / "report2"), "--grid", "alpha=0.3"]) == 0
    assert "[prox] fedprox: no tuned study in MLflow" in capsys.readouterr().out


def test_per_setting_refusals_name_the_option(tmp_path, capsys):
    space, uri = _space(tmp_path), f"sqlite:///{tmp_path / 'm.db'}"
    args = ["--space", str(space), "--mlflow-uri", uri, "--out", str(tmp_path / "r")]
    assert ablate.main([*args, "--per-setting"]) == 2
    assert "error: --per-setting: needs the --grid it was tuned over" in capsys.readouterr().err
    assert ablate.main([*args, "--grid", "alpha=0.3", "--per-setting", "--ignore-studies"]) == 2
    assert "--per-setting: uses no study (--ignore-studies)" in capsys.readouterr().err
    assert ablate.main([*args, "--grid", "alpha=0.3", "--per-setting"]) == 2
    err = capsys.readouterr().err
    assert "--per-setting: variant 'prox' has no finished study tuned at partition.alpha=0.3" in err
    assert "--per-setting alpha=0.3" in err
    assert main(["--space", str(space), "--mlflow-uri", uri, "--per-setting", "alpha=-1"]) == 2
    assert "base.partition.alpha" in (err := capsys.readouterr().err) and "--per-setting partition.alpha=-1" in err
    assert not (tmp_path / "r").exists() and not (tmp_path / "m.db").exists()  # nothing written by a refusal
