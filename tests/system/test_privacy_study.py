"""A study under a privacy budget, end to end through scripts/tune.py, read back from MLflow: with target_epsilon 8
no trial's epsilon exceeds 8 at any round, each spends almost all of it by its last planned round, every round logs
epsilon, and a searched clip norm is the trial's own param; central DP-FedAvg and local DP-SGD alike."""

from __future__ import annotations

import pytest
import yaml
from mlflow.tracking import MlflowClient

from raytune_fl.cli import main
from raytune_fl.cli.ablate import main as ablate
from raytune_fl.metrics import DP_NOISE_MULTIPLIER, EPSILON
from tests.support import REPO

SPACE = REPO / "search_spaces" / "privacy.yaml"
SMOKE = [
    "--rounds=3",
    "--num-samples=2",
    "--set=base.dataset=digits",
    "--set=base.partition.clients=6",
    "--set=base.partition.min_size=20",
    "--set=base.participation=0.5",
    "--no-models",
]


def _local_space(tmp_path) -> str:
    """The file under local DP-SGD: UniVarFL's batch statistics have no per-sample loss (refused), and the model
    with GroupNorm in place of BatchNorm."""
    data = yaml.safe_load(SPACE.read_text())
    del data["variants"]["univarfl"]
    data["base"]["privacy"]["mechanism"], data["base"]["model"] = "local", "simple_cnn_gn"
    path = tmp_path / "local.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize(("mechanism", "variant"), [("central", "fedavg"), ("local", "fedprox")])
def test_no_trial_spends_more_than_its_target_epsilon_and_mlflow_says_so_round_by_round(
    mechanism, variant, ray_cluster, tmp_path, capsys
):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    space = str(SPACE) if mechanism == "central" else _local_space(tmp_path)
    args = ["--space", space, "--mlflow-uri", uri, "--storage", str(tmp_path / "ray"), *SMOKE, "--variants", variant]
    assert main(args) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert f"{EPSILON} " in out  # the summary shows what the selected trial spent
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("privacy")
    trials = [r for r in client.search_runs([experiment.experiment_id]) if "mlflow.parentRunId" in r.data.tags]
    assert len(trials) == 2
    for run in trials:
        spent = [m.value for m in sorted(client.get_metric_history(run.info.run_id, EPSILON), key=lambda m: m.step)]
        assert len(spent) == 3 and spent == sorted(spent)  # every round, growing
        assert max(spent) <= 8.0 and spent[-1] >= 7.9  # the noise spends the budget over the planned rounds
        assert run.data.metrics[DP_NOISE_MULTIPLIER] > 0
        assert run.data.params["privacy.mechanism"] == mechanism
        assert 0.05 <= float(run.data.params["privacy.clip_norm"]) <= 5.0  # the searched value, not base's 1.0
        assert float(run.data.params["privacy.clip_norm"]) != 1.0
    # the ablation trains the selected clip norm at a held-out seed (the cell's params show it), under the budget
    [parent] = [r for r in client.search_runs([experiment.experiment_id]) if "mlflow.parentRunId" not in r.data.tags]
    tuned = parent.data.tags["best.privacy.clip_norm"]
    storage = ["--mlflow-uri", uri, "--storage", str(tmp_path / "ray"), "--variants", variant]
    argv = ["--space", space, *storage, *SMOKE[:1], *SMOKE[2:-1], "--seeds", "1", "--out", str(tmp_path / "abl")]
    assert ablate(argv) == 0, capsys.readouterr().err
    assert "Privacy: epsilon spent" in (tmp_path / "abl" / "ablation_table.md").read_text()
    cells = [
        r
        for r in client.search_runs([experiment.experiment_id], "tags.stage = 'ablation'")
        if "mlflow.parentRunId" in r.data.tags
    ]
    assert len(cells) == 1 and float(cells[0].data.params["privacy.clip_norm"]) == pytest.approx(float(tuned))
    assert cells[0].data.metrics[EPSILON] <= 8.0
