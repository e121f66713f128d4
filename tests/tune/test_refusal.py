"""A configuration error found only inside a trial (tune/refusal.py): the result it is reported as, the error found
inside Ray's wrapper, the stopper. The whole command on a private Ray: tests/system/test_refused_trial.py."""

from __future__ import annotations

import math

from ray.exceptions import RayTaskError

from raytune_fl.config import ConfigError
from raytune_fl.devices import DeviceError
from raytune_fl.tune.refusal import REFUSED_KEY, StopOnRefusal, config_fault, refusal, refused_result


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
