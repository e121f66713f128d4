"""A configuration error found only inside a trial (tune/refusal.py): reported once, never retried, the run stopped,
the command exits 2 with the error's own text and no traceback."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
import time

import yaml
from mlflow.tracking import MlflowClient
from ray.exceptions import RayTaskError

from raytune_fl.config import ConfigError
from raytune_fl.devices import DeviceError
from raytune_fl.tune.refusal import REFUSED_KEY, StopOnRefusal, config_fault, refusal, refused_result
from tests.support import REPO, tiny_space


def test_the_refused_result_carries_the_text_and_every_objective_at_its_worst():
    result = refused_result(ConfigError("model: too small\nuse another"))
    assert result[REFUSED_KEY] == "model: too small\nuse another"
    assert result["val_acc"] == -math.inf and result["client_acc_worst"] == -math.inf  # maximised
    assert result["val_loss"] == math.inf and result["client_acc_var"] == math.inf  # minimised
    assert refusal(result) == "model: too small\nuse another" and refusal({"val_acc": 0.5}) is None


def test_an_actors_config_error_is_found_inside_rays_task_error_and_other_errors_are_not():
    cause = DeviceError("precision: 'bf16' needs a device with bfloat16 support")
    wrapped = RayTaskError("ClientActor.train", "Traceback (most recent call last): ...", cause)
    assert config_fault(wrapped) is cause
    assert config_fault(wrapped.as_instanceof_cause()) is cause
    assert config_fault(RuntimeError("out of memory")) is None


def test_the_stopper_stops_the_refused_trial_then_the_whole_run():
    stopper = StopOnRefusal()
    assert stopper("a", {"val_acc": 0.5}) is False and stopper.stop_all() is False
    assert stopper("b", refused_result(ConfigError("model: no"))) is True
    assert stopper.stop_all() is True


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


def test_a_config_error_raised_in_the_trial_exits_2_once_without_retries_or_next_steps(tmp_path):
    (tmp_path / "plug_refuse.py").write_text(textwrap.dedent(REFUSING_MODEL))
    data = tiny_space("refused", rounds=2, model="plug_refusing", resources={"actors": 0})
    data["plugins"] = ["plug_refuse"]
    data["variants"] = {"prox": {"method": "fedprox", "search": {"mu": {"loguniform": [0.01, 1.0]}}}}
    data["tune"]["num_samples"] = 2  # the second never starts: the first one's refusal stops the run
    (tmp_path / "refused.yaml").write_text(yaml.safe_dump(data))
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    argv = ["--space", "refused.yaml", "--storage", str(tmp_path / "ray"), "--mlflow-uri", uri, "--no-models"]
    started = time.monotonic()
    run = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "tune.py"), *argv],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=240,
    )
    took = time.monotonic() - started
    printed = run.stdout + run.stderr
    message = "model: 'plug_refusing' needs images of 32x32 or more; these are (8, 8)"
    assert run.returncode == 2, printed
    assert f"error: {message}\n" in run.stderr and printed.count(message) == 1, printed
    assert "Traceback" not in printed and "=== next ===" not in printed and "restarts it" not in printed, printed
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("refused").experiment_id])
    [parent] = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert parent.info.status == "FAILED" and parent.data.tags["failure"] == message
    trials = [r for r in runs if "mlflow.parentRunId" in r.data.tags]  # the first trial only: the run stopped there
    assert [(r.info.status, r.data.tags["trial_status"]) for r in trials] == [("FAILED", "error")]
    assert not trials[0].data.metrics  # no round was logged: the refusal is no round
    print(f"refused study: {took:.1f} s")
