"""A configuration error found only inside a trial, through the real tune.py and ablate.py on a private Ray
(tune/refusal.py): the first ends the study (or the ablation), unretried; exit 2 with the error's own text once, no
traceback, no "next", no table."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import yaml
from mlflow.tracking import MlflowClient

from tests.support import REPO, tiny_space

# a model whose factory refuses only where Ray runs it: it stands for a check only the trial's node can make (its
# device, its files), which the driver's build of the plugin's model before Ray starts passes
REFUSING_MODEL = """
    import ray
    from torch import nn

    from raytune_fl import register_model
    from raytune_fl.config import ConfigError


    class Net(nn.Module):
        def __init__(self, in_channels, num_classes, image_size):
            super().__init__()
            self.classifier = nn.Linear(in_channels * image_size[0] * image_size[1], num_classes)

        def forward(self, x):
            z = x.flatten(1)
            return self.classifier(z), z


    def refusing(in_channels, num_classes, image_size):
        if ray.is_initialized():
            raise ConfigError(f"model: 'plug_refusing' needs images of 32x32 or more; these are {image_size}")
        return Net(in_channels, num_classes, image_size)


    register_model("plug_refusing", refusing)
"""


def _refused_once(script: str, argv: list[str], folder, message: str) -> str:
    """scripts/<script> run in `folder`: exit 2 with `message` once on stderr, no traceback, no "next" steps; what
    it printed."""
    run = subprocess.run(
        [sys.executable, str(REPO / "scripts" / script), *argv], capture_output=True, text=True, cwd=folder, timeout=240
    )
    printed = run.stdout + run.stderr
    assert run.returncode == 2, printed
    assert f"error: {message}\n" in run.stderr and printed.count(message) == 1, printed
    assert "Traceback" not in printed and "=== next ===" not in printed, printed
    return printed


def test_a_config_error_raised_in_a_trial_or_cell_exits_2_once_without_retries_or_next_steps(tmp_path):
    (tmp_path / "plug_refuse.py").write_text(textwrap.dedent(REFUSING_MODEL))
    data = tiny_space("refused", rounds=2, model="plug_refusing", resources={"actors": 0})
    data["plugins"] = ["plug_refuse"]
    data["variants"] = {"prox": {"method": "fedprox", "search": {"mu": {"loguniform": [0.01, 1.0]}}}}
    data["tune"]["num_samples"] = 2  # the second never starts: the first one's refusal stops the run
    (tmp_path / "refused.yaml").write_text(yaml.safe_dump(data))
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    argv = ["--space", "refused.yaml", "--storage", str(tmp_path / "ray"), "--mlflow-uri", uri, "--no-models"]
    message = "model: 'plug_refusing' needs images of 32x32 or more; these are (8, 8)"
    printed = _refused_once("tune.py", argv, tmp_path, message)
    assert "restarts it" not in printed, printed
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("refused").experiment_id])
    [parent] = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert parent.info.status == "FAILED" and parent.data.tags["failure"] == message
    trials = [r for r in runs if "mlflow.parentRunId" in r.data.tags]  # the first trial only: the run stopped there
    assert [(r.info.status, r.data.tags["trial_status"]) for r in trials] == [("FAILED", "error")]
    assert not trials[0].data.metrics  # no round was logged: the refusal is no round
    # the study record says so: --resume starts the variant afresh rather than resuming a refused study
    [record] = (tmp_path / "ray").glob("*.study.json")
    entry = json.loads(record.read_text())["variants"]["prox"]
    assert entry["outcome"] is None and entry["refused"]["why"] == message

    # ablate stops on the same error the same way (exit 2, its text once) and writes no table from the failed cell
    argv = ["--space", "refused.yaml", "--storage", str(tmp_path / "ray"), "--mlflow-uri", uri, "--seeds", "1"]
    argv += ["--ignore-studies", "--out", str(tmp_path / "reports"), "--no-dashboard"]
    printed = _refused_once("ablate.py", argv, tmp_path, message)
    assert not list((tmp_path / "reports").glob("ablation_table.*")), printed
    runs = client.search_runs([client.get_experiment_by_name("refused").experiment_id], "tags.stage = 'ablation'")
    [ablation] = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert ablation.info.status == "FAILED" and ablation.data.tags["failure"] == message
