"""Issue 46's audit: a study stopped by Ctrl-C (SIGINT to its process group, as a terminal sends it), by SIGTERM of
its driver and of its whole group (issue 59), and by a second Ctrl-C, at seeded random rounds, exits non-zero,
reports no cut trial as best, and `--resume` completes it to the uninterrupted result; `ablate` refuses a variant
whose study was cut, and an ablation stopped by Ctrl-C writes no table and resumes to one."""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import tempfile
import time

from mlflow.tracking import MlflowClient

from raytune_fl.cli import ablate, main
from tests.support.killed_study import finished_trials, resumable_space, start_script

# every round line the searched variant prints with --verbose, in the order it runs them (three trials one at a
# time, 4 rounds each); fedavg runs before it
POINTS = [f"[full] trial {t}/3 round {r}/4" for t in range(1, 4) for r in range(1, 5)]
# the first stop: fedavg's study has ended, its best model is being exported or the next variant set up
BETWEEN_VARIANTS = "[fedavg] done:"
# how each stop is sent, and the exit code it must give
STOPS = [
    ("SIGINT to the group", 130),
    ("SIGTERM to the group", 143),  # timeout(1), a batch system's stop: the private cluster is not in the group
    ("SIGTERM to the driver", 143),
    ("Ctrl-C twice", 130),
]


def _seeded_points(seed: int) -> list[str]:
    """Between the variants, then three increasing points of POINTS at least two rounds apart (a resumed run
    reaches each later one)."""
    rng = random.Random(seed)
    while True:
        picked = sorted(rng.sample(range(len(POINTS) - 1), 3))
        if all(b - a >= 2 for a, b in zip(picked, picked[1:])):
            return [BETWEEN_VARIANTS, *(POINTS[i] for i in picked)]


def _stop_at(process: subprocess.Popen, marker: str, how: str, timeout_s: float = 400) -> tuple[str, int]:
    """Sends the stop when `marker` is printed; what the command printed in all, and its exit code."""
    seen, deadline, sent = [], time.time() + timeout_s, False
    try:
        while time.time() < deadline:
            line = process.stdout.readline()
            if not line and process.poll() is not None:
                break
            seen.append(line)
            if not sent and marker in line:
                sent = True
                if how == "SIGTERM to the driver":
                    os.kill(process.pid, signal.SIGTERM)  # a scheduler's stop: the driver only
                elif how == "SIGTERM to the group":
                    os.killpg(process.pid, signal.SIGTERM)  # timeout(1), kill -- -PGID: the whole group
                else:
                    os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole group
                    if how == "Ctrl-C twice":
                        time.sleep(0.3)
                        os.killpg(process.pid, signal.SIGINT)
        code = process.wait(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert sent, f"never saw {marker!r}:\n{''.join(seen)[-3000:]}"
    return "".join(seen), code


def _runs(uri: str):
    client = MlflowClient(uri)
    return client.search_runs([client.get_experiment_by_name("resumable").experiment_id])


def test_stops_at_seeded_points_resume_to_the_uninterrupted_result(ray_cluster, tmp_path, capsys, request):
    space = resumable_space(tmp_path)
    reference_uri = f"sqlite:///{tmp_path / 'reference.db'}"
    assert main(["--space", str(space), "--storage", str(tmp_path / "ref"), "--mlflow-uri", reference_uri]) == 0

    uri = f"sqlite:///{tmp_path / 'cut.db'}"
    args = ["--space", str(space), "--storage", str(tmp_path / "cut"), "--mlflow-uri", uri, "--verbose"]
    ray_tmp = tempfile.mkdtemp(prefix="ri", dir="/tmp")  # short: Ray's socket paths have a length limit
    request.addfinalizer(lambda: shutil.rmtree(ray_tmp, ignore_errors=True))
    expected_resume = f"resume with: python scripts/tune.py {' '.join(args)} --resume"
    refused_once = False
    for step, (point, (how, code)) in enumerate(zip(_seeded_points(46), STOPS, strict=True)):
        printed, exit_code = _stop_at(
            start_script("tune.py", args if step == 0 else [*args, "--resume"], ray_tmp), point, how
        )
        context = f"{how} at {point!r}:\n{printed[-3000:]}"
        assert exit_code == code, context
        assert "=== best configuration" not in printed, context  # nothing summarised or selected
        assert "Traceback" not in printed and "Tuner.restore" not in printed, context
        assert "already reported" not in printed, context  # a round run again is reported to Optuna once
        rounds = re.findall(r"^\[\w+\] trial \d+/\d+ round \d+/\d+ ", printed, re.M)
        assert len(rounds) == len(set(rounds)), context  # and printed once
        assert re.search(r"^interrupted by (Ctrl-C|SIGTERM)", printed, re.M), context
        assert printed.rstrip().splitlines()[-1] == expected_resume, context
        cut = [r for r in _runs(uri) if "mlflow.parentRunId" not in r.data.tags and r.info.status != "FINISHED"]
        assert all(r.info.status == "KILLED" and r.data.tags.get("interrupted") == "true" for r in cut), context
        assert all(not k.startswith("best") for r in cut for k in [*r.data.metrics, *r.data.tags]), context
        if point.startswith("[full]") and not refused_once:  # the cut study's variant is refused by ablate
            refused_once = True
            capsys.readouterr()
            refused = ablate.main(["--space", str(space), "--mlflow-uri", uri, "--storage", str(tmp_path / "a")])
            message = capsys.readouterr().err.splitlines()[0]
            assert refused == 2 and message.startswith("error: variants.full: its newest tune study"), message
            assert f"finish it with: python scripts/tune.py {' '.join(args)} --resume" in message

    capsys.readouterr()
    assert main([*args, "--resume"]) == 0
    printed, errors = capsys.readouterr()
    assert "=== best configuration" in printed and "already reported" not in printed + errors
    rounds = re.findall(r"^\[\w+\] trial \d+/\d+ round \d+/\d+ ", printed, re.M)
    assert len(rounds) == len(set(rounds)), printed
    runs = _runs(uri)
    assert not [r for r in runs if r.info.status == "RUNNING"]  # no orphans
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert sorted(r.data.tags["variant"] for r in parents) == ["fedavg", "full"]  # one parent each, reused
    assert all(r.info.status == "FINISHED" and "interrupted" not in r.data.tags for r in parents)
    assert any(r.data.tags.get("resumed") == "true" for r in runs if r not in parents)  # a cut trial kept its run
    assert finished_trials(uri) == finished_trials(reference_uri)  # every round once, the same numbers


def test_a_stop_at_start_up_exits_130_and_says_how_to_go_on(tmp_path, request):
    space = resumable_space(tmp_path)
    args = ["--space", str(space), "--storage", str(tmp_path / "s"), "--mlflow-uri", f"sqlite:///{tmp_path}/m.db"]
    ray_tmp = tempfile.mkdtemp(prefix="rs", dir="/tmp")
    request.addfinalizer(lambda: shutil.rmtree(ray_tmp, ignore_errors=True))
    printed, code = _stop_at(start_script("tune.py", args, ray_tmp), "data: ", "SIGINT to the group")
    assert code == 130, printed
    assert "Traceback" not in printed and "=== variant" not in printed, printed
    last = printed.rstrip().splitlines()[-1]
    assert last == "nothing was started: run the same command again" or last.endswith("--resume"), printed


def test_an_ablation_stopped_by_ctrl_c_writes_no_table_and_resumes_to_one(ray_cluster, tmp_path, request):
    space = resumable_space(tmp_path)
    uri, out = f"sqlite:///{tmp_path}/m.db", tmp_path / "out"
    args = ["--space", str(space), "--mlflow-uri", uri, "--storage", str(tmp_path / "s"), "--out", str(out)]
    args += ["--seeds", "2", "--ignore-studies", "--no-dashboard", "--verbose"]
    ray_tmp = tempfile.mkdtemp(prefix="ra", dir="/tmp")
    request.addfinalizer(lambda: shutil.rmtree(ray_tmp, ignore_errors=True))
    printed, code = _stop_at(start_script("ablate.py", args, ray_tmp), "cell 2/4 round 2/4", "SIGINT to the group")
    assert code == 130, printed
    assert not (out / "ablation_table.md").exists()  # a table of some cells is not the plan's
    assert printed.rstrip().splitlines()[-1] == f"resume with: python scripts/ablate.py {' '.join(args)} --resume"
    parent = next(r for r in _runs(uri) if r.data.tags.get("role") == "parent")
    assert parent.info.status == "KILLED" and parent.data.tags["interrupted"] == "true"

    assert ablate.main([*args, "--resume"]) == 0
    table = (out / "ablation_table.md").read_text()
    assert not re.search(r"\(\d+/\d+\)", table), table  # every cell ran: no (n/runs) partial counts
    parent = next(r for r in _runs(uri) if r.data.tags.get("role") == "parent")
    assert parent.info.status == "FINISHED" and "interrupted" not in parent.data.tags
    # the cut cell's run is marked superseded by the run that ran the cell again: one current run per cell
    cells = [r for r in _runs(uri) if r.data.tags.get("role") != "parent"]
    by_id = {r.info.run_id: r for r in cells}
    superseded = [r for r in cells if "superseded_by" in r.data.tags]
    assert superseded and all(r.info.run_name.endswith(" (superseded)") for r in superseded)
    for old in superseded:
        new = by_id[old.data.tags["superseded_by"]]
        assert new.data.tags["cell"] == old.data.tags["cell"] and new.info.status == "FINISHED"
    current = [r.data.tags["cell"] for r in cells if "superseded_by" not in r.data.tags]
    assert len(current) == len(set(current)) == 4, current
