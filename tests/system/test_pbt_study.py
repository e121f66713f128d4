"""A real PBT study (tune.scheduler.pbt) on a private Ray cluster: the population is perturbed between rounds, every
trial logs the hyperparameters in force per round (hp.<name>), the study selects a schedule and records it on its
parent run, and `ablate` replays that schedule over held-out seeds, its cells logging the same per-round values; the
same study SIGKILLed after its first perturbation resumes with `--resume` to a selected schedule. PBT and PB2 alike."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import tempfile

import pytest
import yaml
from mlflow.tracking import MlflowClient

from raytune_fl.cli import main as tune
from raytune_fl.cli.ablate import main as ablate
from raytune_fl.config import ParamSchedule
from raytune_fl.tracking.schema import TAG_BEST_SCHEDULE, TAG_DESCRIPTION, TAG_PARENT_RUN, TAG_STAGE, TAG_VARIANT
from tests.support import tiny_space
from tests.support.killed_study import kill_when, start_script


def _metric_steps(client: MlflowClient, run_id: str, name: str) -> dict[int, float]:
    return {m.step: m.value for m in client.get_metric_history(run_id, name)}


# perturb: PBT's random steps; bandit: PB2's GP bandit picks the copying trial's values
@pytest.mark.parametrize("explore", ["perturb", "bandit"])
def test_a_pbt_study_perturbs_logs_its_schedule_and_ablate_replays_it(explore, ray_cluster, tmp_path, request):
    data = tiny_space("pbt_study", rounds=4, resources={"actors": 0})
    data["variants"] = {"full": data["variants"]["full"]}
    # the top and bottom third: one trial copies another at round 2 (none at the last round)
    pbt = {"interval": 2, "quantile": 0.34, "explore": explore}
    data["tune"] = {"num_samples": 3, "scheduler": {"pbt": pbt}, "seed": 0}
    path = tmp_path / "pbt_study.yaml"
    path.write_text(yaml.safe_dump(data))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    common = ["--space", str(path), "--mlflow-uri", uri, "--storage", str(tmp_path / "ray_results")]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        # --no-models: the model helper (lowest CPU priority) is not what this test is about
        assert tune([*common, "--no-models"]) == 0, printed.getvalue()[-3000:]
    assert "schedule: rounds 1-: " in printed.getvalue()  # the summary shows the selected schedule

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("pbt_study").experiment_id
    runs = client.search_runs([experiment])
    [parent] = [r for r in runs if TAG_PARENT_RUN not in r.data.tags and r.data.tags.get(TAG_STAGE) == "tune"]
    trials = [r for r in runs if r.data.tags.get(TAG_PARENT_RUN) == parent.info.run_id]
    assert len(trials) == 3 and all(r.info.status == "FINISHED" for r in trials)
    shown = {"perturb": "PBT", "bandit": "PB2"}[explore]
    assert f"{shown} over rounds (every 2 rounds" in parent.data.tags[TAG_DESCRIPTION]
    # every trial logged the values in force at each of its 4 rounds
    hp = {r.info.run_id: _metric_steps(client, r.info.run_id, "hp.mu") for r in trials}
    assert all(sorted(steps) == [1, 2, 3, 4] for steps in hp.values()), hp
    # a perturbation happened: the worst trial went on at round 3 with values it did not start with
    assert any(steps[3] != steps[2] for steps in hp.values()), hp
    # the selected schedule is on the parent, its last values the selected ones
    schedule = ParamSchedule.from_json(parent.data.tags[TAG_BEST_SCHEDULE])
    assert schedule.segments[0].first_round == 1
    assert float(parent.data.tags["best.mu"]) == schedule.in_force(4)["mu"]

    # ablate replays the schedule over a held-out seed: the cell logs the schedule's values round by round
    out = tmp_path / "reports"
    ablated = io.StringIO()
    with contextlib.redirect_stdout(ablated):
        assert ablate([*common, "--seeds", "1", "--out", str(out)]) == 0, ablated.getvalue()[-3000:]
    assert "replaying its PBT schedule" in ablated.getvalue()
    runs = client.search_runs([experiment], filter_string="tags.stage = 'ablation'")
    cells = [r for r in runs if TAG_PARENT_RUN in r.data.tags and r.data.tags.get(TAG_VARIANT) == "full"]
    assert len(cells) == 1 and cells[0].info.status == "FINISHED"
    replayed = _metric_steps(client, cells[0].info.run_id, "hp.mu")
    assert replayed == {r: schedule.in_force(r)["mu"] for r in range(1, 5)}
    assert json.loads(parent.data.tags[TAG_BEST_SCHEDULE])  # a JSON list of segments

    # killed after the perturbation (a trial at round 3), the study resumes from its checkpoints to a schedule
    killed_uri, killed_storage = f"sqlite:///{tmp_path / 'killed.db'}", str(tmp_path / "killed")
    args = ["--space", str(path), "--mlflow-uri", killed_uri, "--storage", killed_storage, "--no-models"]
    ray_tmp = tempfile.mkdtemp(prefix="rp", dir="/tmp")  # short: Ray's socket paths have a length limit
    request.addfinalizer(lambda: shutil.rmtree(ray_tmp, ignore_errors=True))
    kill_when(start_script("tune.py", [*args, "--verbose"], ray_tmp), "round 3/4", timeout_s=400)
    resumed = io.StringIO()
    with contextlib.redirect_stdout(resumed):
        assert tune([*args, "--resume"]) == 0, resumed.getvalue()[-3000:]
    client = MlflowClient(killed_uri)
    runs = client.search_runs([client.get_experiment_by_name("pbt_study").experiment_id])
    assert not [r for r in runs if r.info.status == "RUNNING"]
    [parent] = [r for r in runs if TAG_PARENT_RUN not in r.data.tags]
    assert ParamSchedule.from_json(parent.data.tags[TAG_BEST_SCHEDULE]).segments
    trials = [r for r in runs if r.data.tags.get(TAG_PARENT_RUN) == parent.info.run_id]
    assert len(trials) == 3
    assert all(sorted(_metric_steps(client, r.info.run_id, "hp.mu")) == [1, 2, 3, 4] for r in trials)
