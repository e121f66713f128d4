"""runtime/cluster.py::start_local: a private one-node cluster without the autoscaler's monitor, the API server and
(when nothing is forwarded) the log monitor, which still runs tasks; Ray's own parameters are restored after; token
authentication stays on, without Ray's banner about it.
(Idle prestarted workers and RayStart on a thread, on clusters of their own: tests/system/test_local_cluster.py.)"""

from __future__ import annotations

import os
import subprocess
import sys

CHILD = """
import os, ray
from ray._private import node, parameter
from benchmarks.proc import descendants
from raytune_fl.runtime.cluster import start_local
start_local(num_cpus=1)
names = [open(f"/proc/{p}/cmdline").read().replace(chr(0), " ") for p in descendants(os.getpid())[1:]]
print("RAYLET", any("raylet/raylet" in n for n in names))
for script in ("autoscaler/_private/monitor.py", "dashboard/dashboard.py", "log_monitor.py"):
    print(script, any(script in n for n in names))
print("TASK", ray.get(ray.remote(lambda: 41 + 1).remote()))
print("RESTORED", parameter.RayParams.__name__, node.Node.start_api_server.__name__)
from ray._raylet import AuthenticationMode, get_authentication_mode
print("TOKEN", get_authentication_mode() == AuthenticationMode.TOKEN)
ray.shutdown()
"""


def test_start_local_leaves_out_the_unused_head_processes_and_still_runs_tasks():
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}  # Ray's default: token authentication
    out = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=180, check=True, env=env
    )
    lines = out.stdout.splitlines()
    assert "RAYLET True" in lines and "TASK 42" in lines
    left_out = {"autoscaler/_private/monitor.py False", "dashboard/dashboard.py False", "log_monitor.py False"}
    assert left_out <= set(lines)
    assert "RESTORED RayParams start_api_server" in lines
    # the cluster is token-protected as Ray makes it; only its banner about that, at every start, is gone
    assert "TOKEN True" in lines
    assert "Token authentication is enabled" not in out.stderr, out.stderr


# ------------------------------------------------------------------------------------------------ tune.py's early start
