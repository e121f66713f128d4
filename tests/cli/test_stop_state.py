"""cli/stopping.py's StopState: what a command says when Ctrl-C or SIGTERM stops it, kept as the command goes (not
on its argparse.Namespace)."""

from __future__ import annotations

import signal

from raytune_fl.cli import stopping
from raytune_fl.tune.interrupt import StudyInterrupted


def test_before_a_record_exists_a_stop_says_to_run_the_command_again(capsys):
    state = stopping.StopState("before any variant started")
    assert state.stopped(StudyInterrupted(signal.SIGINT)) == 130
    err = capsys.readouterr().err
    assert "interrupted by Ctrl-C: before any variant started" in err
    assert err.rstrip().endswith("nothing was started: run the same command again")


def test_once_a_record_exists_a_stop_says_what_was_cut_and_how_to_resume(capsys):
    state = stopping.StopState("before the ablation started")
    state.cut, state.resumable = "ablation run r1 stopped (KILLED)", True
    with stopping.guarded("ablate", ["--space", "s.yaml"]):
        assert state.stopped(StudyInterrupted(signal.SIGTERM, forced=True)) == 143
    err = capsys.readouterr().err
    assert "interrupted by SIGTERM (forced): ablation run r1 stopped (KILLED)" in err
    assert err.rstrip().splitlines()[-1].startswith("resume with: ") and err.rstrip().endswith("--resume")


def test_the_cut_line_says_killed_unless_mlflow_left_the_parent_running():
    from raytune_fl.cli.tune import _cut

    killed = _cut("full", ["fedavg"], ["fedprox"])
    assert killed == (
        "variant 'full' stopped mid-study, nothing selected for it (its parent run KILLED); finished: fedavg; "
        "not started: fedprox"
    )
    left = _cut("full", [], [], left_running="abc123")
    assert left == "variant 'full' stopped mid-study, nothing selected for it (its parent run abc123 left RUNNING)"
    assert _cut(None, [], []) == "before any variant started"
