"""Issue 46: `raytune-fl tune ... | tee log` carries no ANSI escape codes. A real study in its own process (its own
private Ray cluster), stdout and stderr pipes: a trial prints a notice, which Ray's driver forwards under its
`(federated_trial pid=...)` prefix, coloured unless RAY_COLOR_PREFIX=0 (cli/progress.py's plain_worker_lines); the
status line is whole lines (cli/progress.py); client_batch above the clients a round trains is one WARNING line.
(Each emitter on its own: tests/cli/test_progress.py.)"""

from __future__ import annotations

import os
import subprocess
import sys

import yaml

from tests.support import tiny_space

RUN = "from raytune_fl.cli.console import run; run()"  # the console script's entry point


def test_a_piped_study_prints_no_escape_codes(tmp_path):
    data = tiny_space("piped", rounds=2)
    data["base"]["resources"]["client_batch"] = 8  # more than the 3 clients a round trains: one WARNING line
    data["variants"] = {"moon": {"method": "moon"}}  # the trial's notice: MOON trains its clients one at a time
    space = tmp_path / "piped.yaml"
    space.write_text(yaml.safe_dump(data))
    argv = ["tune", "--space", str(space), "--storage", str(tmp_path / "ray"), "--mlflow-uri"]
    argv.append(f"sqlite:///{tmp_path / 'm.db'}")
    hidden = ("RAY_COLOR_PREFIX", "NO_COLOR", "RAY_ADDRESS")  # Ray's default colours, a private cluster
    environment = {k: v for k, v in os.environ.items() if k not in hidden and not k.startswith("AWS_")}
    environment["TERM"] = "xterm-256color"  # a colour terminal's setting, only the streams are pipes
    done = subprocess.run(
        [sys.executable, "-c", RUN, *argv], capture_output=True, text=True, timeout=300, env=environment
    )
    printed = done.stdout + done.stderr
    assert done.returncode == 0, printed[-3000:]
    # the forwarded line is there (so Ray printed a prefix), without colour
    assert "(federated_trial pid=" in printed and "moon trains its clients one at a time" in printed, printed[-3000:]
    assert "\x1b" not in printed and "\r" not in printed, [line for line in printed.splitlines() if "\x1b" in line]
    warnings = [line for line in done.stderr.splitlines() if "resources.client_batch: 8" in line]
    assert warnings == [
        "WARNING: base.resources.client_batch: 8 is more than the 3 clients a round trains (participation 1 of 3 "
        "clients); 3 is used"
    ]
    assert "[moon] trial 1/1 finished" in done.stdout
