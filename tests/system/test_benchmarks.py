"""The benchmarks end to end: the reference loop in two worker processes computes what one process does; a tiny
search benchmark runs and draws the landscape; a tiny search-efficiency run reports its searchers. (Their arithmetic
by hand: tests/tooling/.)"""

from __future__ import annotations

import json
import math

import pytest
import torch

from benchmarks.search import main
from tests.support.workload import WORKLOAD_SIZES


# the workload trained in one process, then in two worker processes: ~17 s
def test_the_reference_loop_in_two_worker_processes_computes_what_one_process_does():
    from benchmarks.reference import run

    before = torch.get_num_threads()
    torch.set_num_threads(1)  # the workers train with 1 thread: the same sums in the same order
    try:
        one, two = run(rounds=1), run(rounds=1, processes=2)
    finally:
        torch.set_num_threads(before)
    assert two["test_acc"] == one["test_acc"] == pytest.approx([0.084, 0.102], abs=1e-9)
    assert two["sizes"] == WORKLOAD_SIZES


def test_a_tiny_search_benchmark_runs_end_to_end_and_draws_the_landscape(tmp_path, capsys):
    args = ["--grid", "2", "--grid-seeds", "1", "--trials", "2", "--search-seeds", "1", "--rounds", "2"]
    args += [
        "--strategies",
        "tpe_asha",
        "--actors",
        "0",
        "--workdir",
        str(tmp_path),
        "--json",
        str(tmp_path / "r.json"),
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "grid: 4 points x 1 seeds" in out and "| tpe_asha | 1 |" in out
    page = (tmp_path / "dashboard.html").read_text()
    assert "Search landscape" in page and "no grid runs" not in page

    result = json.loads((tmp_path / "r.json").read_text())
    study = result["studies"][0]
    assert study["trials"] == 2 and study["client_epochs"] > 0 and not math.isnan(study["rescored_val_acc"])
    assert "ASHA's bet" in out and [r["round"] for r in result["rung_fidelity"]] == [1]
    assert all(len(run["val_curve"]) == 2 for run in result["grid_runs"])


# benchmarks/client_time.py on a tiny protocol, its figures hanging together: the kinds of a step's kernels share out
# its whole time, the bare steps are part of a client round, both loads are timed (timings are the benchmark's
# business, never a test's): ~25 s
def test_the_client_time_benchmark_reports_every_figure(tmp_path, capsys):
    from benchmarks import client_time

    out = tmp_path / "figures.json"
    assert client_time.main(["--clients", "2", "--image", "8", "--samples", "20", "--json", str(out)]) == 0
    found = json.loads(out.read_text())
    shares = [found["kernels"][kind] for kind in [*client_time.KINDS, "other"]]
    assert sum(shares) == pytest.approx(1.0) and found["kernels"]["convolution"] > 0
    assert 0 < found["client"]["bare_steps_ms"] and found["client"]["engine_share"] < 1
    assert found["client"]["load_weights_ms"] > 0 and found["client"]["load_state_dict_ms"] > 0
    assert found["pair"]["alone_ms"] > 0 and found["pair"]["together_ms"] > 0
    assert "the engine's own share" in capsys.readouterr().out


def test_a_tiny_search_efficiency_run_reports_each_searcher_and_its_trials(tmp_path, capsys):
    from benchmarks import search_efficiency

    out, trials = tmp_path / "table.md", tmp_path / "trials.json"
    argv = ["--quick", "--trials", "2", "--rounds", "2", "--out", str(out), "--json", str(trials)]
    argv += ["--workdir", str(tmp_path / "work")]
    assert search_efficiency.main(argv) == 0
    text = out.read_text()
    assert "torch CPU capability" in text and "command: python -m benchmarks.search_efficiency --quick" in text
    assert "| tpe_asha | 1 |" in text and "| random | 1 |" in text
    printed = capsys.readouterr().out
    assert "[1/2] tpe_asha: 1 studies x 2 trials x 2 rounds" in printed
    assert "  random: [random-1] trial 2/2 " in printed  # tune.py's line as the trial ended, echoed
    records = json.loads(trials.read_text())
    assert [(r["searcher"], [t["rounds_run"] for t in r["trials"]]) for r in records] == [
        ("random", [2, 2]),
        ("tpe_asha", [2, 2]),  # ASHA's grace period is every round of 2
    ]
    capsys.readouterr()
    reuse = ["--reuse", "--workdir", str(tmp_path / "work"), "--searchers", "random", "--rounds", "2"]
    assert search_efficiency.main(reuse) == 0
    again = capsys.readouterr().out  # the store's studies reported again, nothing run
    assert "| random | 1 |" in again and "tpe_asha" not in again.split("command:")[1] and "[1/" not in again
