"""The README's first command, as a new user runs it: search_spaces/quickstart.yaml, unchanged, through the
`raytune-fl` console entry point in a fresh directory (its default MLflow store, Optuna storage and Ray results land
there)."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys

import optuna
import pytest
from mlflow.tracking import MlflowClient

from raytune_fl.config import load_space
from tests.support import REPO
from tools import readme_samples

CONSOLE = "from raytune_fl.cli.console import run; run()"  # what the installed `raytune-fl` script runs


def test_the_quick_start_runs_as_the_readme_says(tmp_path):
    space = load_space(REPO / "search_spaces" / "quickstart.yaml")
    assert len(space.variants) == 3 and space.base.rounds <= 5 and space.tune.num_samples <= 4  # stays quick
    readme = (REPO / "README.md").read_text()
    quick_start = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert "raytune-fl tune --space search_spaces/quickstart.yaml" in quick_start
    # a private local cluster of its own, as on a laptop (not the test session's)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {"PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", CONSOLE, "tune", "--space", str(REPO / "search_spaces" / "quickstart.yaml")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    # non-interactive output: whole lines, no per-round lines, a final status per variant
    assert "\r" not in out and "\x1b" not in out and " round 1/4 " not in out
    for variant in space.variants:
        assert f"[{variant}] done: " in out
    # the summary: each best validation accuracy with its standard error over the validation images, said once, and
    # whether single trials can rank the variants
    summary = out.split("=== best configuration per variant", 1)[1].split("\ntotal wall time", 1)[0]
    val_samples = int(re.search(r"\((\d+) held out for validation\)", out)[1])
    assert f"val_acc: one trial, one seed per variant, on {val_samples} validation images" in summary
    assert f"sqrt(p(1-p)/{val_samples})" in summary
    shown = {
        m[0]: (float(m[1]), float(m[2])) for m in re.findall(r"^ +(\w+): val_acc (\S+) % ± (\S+)  ", summary, re.M)
    }
    assert set(shown) == set(space.variants)
    flag = summary.rstrip().splitlines()[-1]
    assert " within 2 standard errors of " in flag or " leads the others by more than 2 standard errors" in flag
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    next_steps = out.split("=== next ===\n", 1)[1]
    assert f"mlflow ui --backend-store-uri {uri} --port 5000" in next_steps
    assert f"optuna-dashboard sqlite:///{tmp_path / 'optuna.db'}" in next_steps
    assert "raytune-fl ablate --space " in next_steps  # the commands in the form the user typed
    # every slower step says itself (cli/progress.py): Ray's start, each variant's first trial, each model's export
    assert "starting Ray (a private local cluster)...\n" in out
    for variant in space.variants:
        assert f"[{variant}] starting trial 1/{1 if variant == 'fedavg' else 3}: its process imports torch" in out
    assert out.count("  saving the selected model to MLflow...\n") == len(space.variants)
    # the run the README shows (tools/samples/quickstart.txt) selected the same: a seeded run is the same run on one
    # machine; elsewhere (AVX2 or AVX-512 kernels, Intel or AMD) TPE proposes the same values (its seeded start-up
    # trials), the same trial wins unless two trials' scores swap, and a score may move by some of the 400 images:
    # within the recorded score's own standard error (FedAvg's 54.8 on an Intel VM was 53.0 on an AMD EPYC one, at
    # the same code), a difference inside the noise, not a stale record
    recorded = readme_samples.selected(readme_samples.TRANSCRIPT.read_text())
    selected = readme_samples.selected(out)
    record_again = "the README's recorded run is stale: python -m tools.readme_samples --record, then --write"
    assert {v: s[2] for v, s in selected.items()} == {v: s[2] for v, s in recorded.items()}, record_again
    for variant, (score, se, _) in selected.items():
        recorded_score, recorded_se, _ = recorded[variant]
        assert abs(score - recorded_score) <= recorded_se, (variant, score, recorded_score, record_again)
        assert abs(se - recorded_se) <= 0.2, (variant, se, recorded_se, record_again)  # printed to 0.1
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("quickstart").experiment_id])
    parents = {r.data.tags["variant"]: r for r in runs if "mlflow.parentRunId" not in r.data.tags}
    assert set(parents) == set(space.variants)
    for variant, parent in parents.items():
        assert parent.info.status == "FINISHED" and parent.data.tags["model_id"].startswith("m-"), variant
        assert parent.inputs.dataset_inputs[0].dataset.name == "mnist5k/dirichlet-0.1/10-clients"
        metrics, p = parent.data.metrics, parent.data.metrics["best_val_acc"]
        assert metrics["val_samples"] == val_samples and parent.data.tags["best_basis"] == "single trial, seed 0"
        assert metrics["best_val_acc_se"] == pytest.approx(math.sqrt(p * (1 - p) / val_samples))
        assert shown[variant] == (round(100 * p, 1), round(100 * metrics["best_val_acc_se"], 1)), variant
    for variant in ("fedprox", "univarfl"):
        study = optuna.load_study(study_name=f"quickstart-{variant}", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
        assert len(study.trials) == space.tune.num_samples
