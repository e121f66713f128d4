"""tune/cluster.py::start_local: a private one-node cluster without the autoscaler's monitor, the API server and
(when nothing is forwarded) the log monitor, which still runs tasks; Ray's own parameters are restored after.
With prestart_workers=False (scripts' clusters: Tune's trials never take them) no idle workers wait."""

from __future__ import annotations

import subprocess
import sys

CHILD = """
import os, sys, time, ray
from ray._private import node, parameter
from raytune_fl.bench.proc import descendants
from raytune_fl.tune.cluster import start_local

def names():
    return [open(f"/proc/{p}/cmdline").read().replace(chr(0), " ") for p in descendants(os.getpid())[1:]]

def idle_workers_within(seconds):  # Ray prestarts them once the driver has registered, within ~2 s here
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if any(n.startswith("ray::IDLE") for n in names()):
            return True
        time.sleep(0.1)
    return False

prestart = sys.argv[1] == "prestart"
start_local(num_cpus=1, prestart_workers=prestart)
print("IDLE", idle_workers_within(15 if prestart else 5))  # before any task: a task leaves its worker idle
names = names()
print("RAYLET", any("raylet/raylet" in n for n in names))
for script in ("autoscaler/_private/monitor.py", "dashboard/dashboard.py", "log_monitor.py"):
    print(script, any(script in n for n in names))
print("TASK", ray.get(ray.remote(lambda: 41 + 1).remote()))
print("RESTORED", parameter.RayParams.__name__, node.Node.start_api_server.__name__)
ray.shutdown()
"""


def _child(prestart: str) -> list[str]:
    command = [sys.executable, "-c", CHILD, prestart]
    out = subprocess.run(command, capture_output=True, text=True, timeout=180, check=True)
    return out.stdout.splitlines()


def test_start_local_leaves_out_the_unused_head_processes_and_still_runs_tasks():
    lines = _child("prestart")
    assert "IDLE True" in lines  # Ray's default: what the next test's clusters leave out
    assert "RAYLET True" in lines and "TASK 42" in lines
    left_out = {"autoscaler/_private/monitor.py False", "dashboard/dashboard.py False", "log_monitor.py False"}
    assert left_out <= set(lines)
    assert "RESTORED RayParams start_api_server" in lines


def test_without_prestarted_workers_no_worker_idles_and_tasks_still_run():
    lines = _child("none")
    assert "IDLE False" in lines
    assert "RAYLET True" in lines and "TASK 42" in lines
