"""runtime/cluster.py's private cluster on real Ray: a trial takes an idle worker Ray prestarted, the one left waits
for the first trial's client actors, a cluster started on a thread outlives the start, and tune.py refused after
the early Ray start ends that cluster. (What start_local leaves out: tests/runtime/test_local_cluster.py.)"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from tests.support import REPO, command_lines, tiny_space

TRIAL_CHILD = """
import os, sys, time, ray
from ray import tune
import raytune_fl.tune.tuner as tuner
from benchmarks.proc import descendants
from raytune_fl.runtime.cluster import start_local

start_local(num_cpus=2)
for _ in range(150):  # Ray prestarts an idle worker per CPU once this driver has registered
    idle = {p for p in descendants(os.getpid()) if open(f"/proc/{p}/cmdline").read().startswith("ray::IDLE")}
    if len(idle) == 2:
        break
    time.sleep(0.1)
if sys.argv[1] == "tune-default":  # Tune's own runtime_env: the trial's process is a new one
    tuner.trials_without_runtime_env = lambda: None
config = tuner.run_config("where", sys.argv[2], [], 0)
trainable = tune.with_resources(lambda config: tune.report({"pid": os.getpid()}), {"cpu": 1})
pid = tune.Tuner(trainable, run_config=config).fit()[0].metrics["pid"]
print("IDLE", len(idle), "TRIAL_ON_AN_IDLE_WORKER", pid in idle)
ray.shutdown()
"""


# two clusters, a Tune run on each: ~25 s
@pytest.mark.parametrize("runtime_env", ["ours", "tune-default"])
def test_a_trial_takes_an_idle_worker_ray_prestarted(tmp_path, runtime_env):
    # (its client actors, which inherit its runtime_env, take the rest when Ray has not ended them as surplus yet)
    environment = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}  # Tune would pass them on
    command = [sys.executable, "-c", TRIAL_CHILD, runtime_env, str(tmp_path)]
    out = subprocess.run(command, capture_output=True, text=True, timeout=300, env=environment)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"IDLE 2 TRIAL_ON_AN_IDLE_WORKER {runtime_env == 'ours'}" in out.stdout.splitlines(), out.stdout


ACTOR_CHILD = """
import os, sys, time, ray
from benchmarks.proc import descendants
from raytune_fl.runtime import cluster

if sys.argv[1] == "ours":
    cluster.start_ray("local")  # the command lines' own local cluster
else:
    cluster.start_local(num_cpus=2)
for _ in range(150):
    idle = {p for p in descendants(os.getpid()) if open(f"/proc/{p}/cmdline").read().startswith("ray::IDLE")}
    if len(idle) == 2:
        break
    time.sleep(0.1)

from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

@ray.remote(num_cpus=0)
class Where:
    def pid(self):
        return os.getpid()

group = placement_group([{"CPU": 1}, {"CPU": 1}])  # as Tune reserves a trial's bundles, then starts the trial
ray.get(group.ready())
in_bundle = lambda i: Where.options(scheduling_strategy=PlacementGroupSchedulingStrategy(group, i)).remote()
trial = in_bundle(0)  # it takes one idle worker; its client actor comes later
first = ray.get(trial.pid.remote())
time.sleep(2.5)
actor = in_bundle(1)
print("IDLE", len(idle), "FIRST", first in idle, "LATER", ray.get(actor.pid.remote()) in idle)
ray.shutdown()
"""


# two clusters: ~20 s
@pytest.mark.parametrize("cluster", ["ours", "ray-default"])
def test_the_idle_worker_left_waits_for_the_first_trials_client_actors(cluster):
    out = subprocess.run([sys.executable, "-c", ACTOR_CHILD, cluster], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"IDLE 2 FIRST True LATER {cluster == 'ours'}" in out.stdout.splitlines(), out.stdout


EARLY_CHILD = """
import time, ray
from raytune_fl.runtime.cluster import RayStart

start = RayStart(None)
start.wait()
# Ray binds its processes to the death of the thread that started them: were that thread gone, GCS and the raylet
# would have been killed by now, and the task below would never run
time.sleep(3)
print("TASK", ray.get(ray.remote(lambda: 41 + 1).remote(), timeout=60))
"""


def _private_ray_environment(ray_tmp: str) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")} | {"RAY_TMPDIR": ray_tmp}


# a cluster: ~10 s
def test_a_cluster_started_on_a_thread_outlives_the_start(request):
    ray_tmp = tempfile.mkdtemp(prefix="rs", dir="/tmp")  # short: Ray's socket paths have a length limit
    request.addfinalizer(lambda: shutil.rmtree(ray_tmp, ignore_errors=True))
    out = subprocess.run(
        [sys.executable, "-c", EARLY_CHILD],
        capture_output=True,
        text=True,
        timeout=240,
        env=_private_ray_environment(ray_tmp),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "TASK 42" in out.stdout.splitlines()
    assert "SIGTERM handler is not set" not in out.stderr  # Ray's warning for a start off the main thread


# a tune.py process that starts a cluster and ends it: ~15 s
def test_tune_refused_after_the_early_ray_start_ends_that_cluster(tmp_path, request):
    """tune.py starts its private cluster once every check passed, beside making the MLflow and Optuna stores; a
    store that then fails to open is said, and the cluster ends with the command."""
    ray_tmp = tempfile.mkdtemp(prefix="re", dir="/tmp")
    request.addfinalizer(lambda: shutil.rmtree(ray_tmp, ignore_errors=True))
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(tiny_space()))
    (tmp_path / "m.db").write_text("not a database")  # passes the checks before Ray (its folder exists); MLflow fails
    bad_uri = f"sqlite:///{tmp_path}/m.db"
    command = [sys.executable, str(REPO / "scripts" / "tune.py"), "--space", str(space)]
    command += ["--storage", str(tmp_path / "ray"), "--mlflow-uri", bad_uri]
    out = subprocess.run(command, capture_output=True, text=True, timeout=240, env=_private_ray_environment(ray_tmp))
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"error: --mlflow-uri: cannot use {bad_uri}" in out.stderr
    assert "Traceback" not in out.stdout + out.stderr
    assert list(Path(ray_tmp).glob("ray/session_2*")), "no cluster was started: the early start was not reached"
    deadline = time.monotonic() + 30
    while (left := [line for line in command_lines() if ray_tmp in line]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, left  # every process of that cluster ended
