"""The performance harness: the reference loop is the benchmark workload, the engine runs the same one, the
process-tree measurement sees grandchildren, and the ratio arithmetic is checked by hand. (Timings themselves
are the benchmarks' business, never a test's.)"""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import torch

from benchmarks import proc, scaling, study, workload
from benchmarks.reference import Net, load_data
from raytune_fl.config import SearchSpace
from raytune_fl.engine.data import prepare_data
from raytune_fl.models import build_model
from tests.support.workload import WORKLOAD_SIZES


def test_the_reference_loop_and_the_engine_run_the_same_workload():
    _, y_train, x_test, _, parts = load_data()
    assert [len(p) for p in parts] == WORKLOAD_SIZES and x_test.shape == (1000, 1, 28, 28)
    engine = prepare_data(workload.workload_config())
    assert not any(len(v) for v in engine.val_parts)  # every client trains on its whole share, as the reference
    assert [p.tolist() for p in engine.train_parts] == [p.tolist() for p in parts]
    assert np.array_equal(engine.dataset.y_train, y_train.numpy())
    reference, ours = Net().state_dict(), build_model("simple_cnn", 1, 10, (28, 28)).state_dict()
    assert {k: v.shape for k, v in reference.items()} == {k: v.shape for k, v in ours.items()}
    assert sum(p.numel() for p in Net().parameters()) == 161_306


def test_the_reference_loop_trains_one_round_like_workload_md():
    # docs/explanation/workload.md#expected-accuracy: test accuracy 0.084 before training and 0.102 after round 1,
    # whatever the thread count
    from benchmarks.reference import run

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        result = run(rounds=1)
    finally:
        torch.set_num_threads(before)
    assert result["test_acc"] == pytest.approx([0.084, 0.102], abs=1e-9) and len(result["round_times"]) == 1


def test_measure_sums_the_pss_of_grandchildren_and_reads_the_report():
    # the child starts a grandchild that holds 150 MiB of touched memory; the child itself holds little
    grandchild = "import time; b = bytearray(150 * 1024 * 1024); time.sleep(1.5)"
    child = (
        "import json, subprocess, sys; "
        f"subprocess.run([sys.executable, '-c', {grandchild!r}], check=True); "
        "print('noise'); print(json.dumps({'ok': 1}))"
    )
    measured = proc.measure([sys.executable, "-c", child], interval_s=0.05)
    assert measured.returncode == 0 and measured.last_json() == {"ok": 1}
    assert measured.peak_pss > 150 * proc.MiB and measured.wall_s >= 1.5
    # each stdout line is stamped when it arrived: after the 1.5 s grandchild, before the exit
    assert [line for _, line in measured.stamped] == ["noise", '{"ok": 1}']
    assert 1.5 <= measured.stamped[0][0] <= measured.stamped[1][0] <= measured.wall_s


def test_a_child_without_a_report_says_so():
    measured = proc.measure([sys.executable, "-c", "import sys; print('no json'); sys.stderr.write('boom')"])
    with pytest.raises(RuntimeError, match=r"no JSON report on stdout \(exit 0\); stderr tail:\nboom"):
        measured.last_json()


def test_workload_ratios_divide_by_the_reference_of_the_same_repetition():
    gib = 1024 * proc.MiB
    results = [
        workload.WayResult("reference", 1, [9.0, 2.0, 2.0, 2.0], 20.0, gib, 0.78),  # median of rounds 2.. = 2.0
        workload.WayResult("reference_procs", 1, [9.0, 2.0, 2.0, 2.0], 20.0, 1.6 * gib, 0.78),  # PSS 2 / 1.6
        workload.WayResult("engine_actors", 1, [9.0, 1.0, 1.0, 1.2], 30.0, 2 * gib, 0.79),  # 1.0 / 2.0
        workload.WayResult("reference", 2, [9.0, 4.0, 4.0, 4.0], 40.0, gib, 0.78),  # a slow repetition
        workload.WayResult("reference_procs", 2, [9.0, 4.0, 4.0, 4.0], 40.0, 2 * gib, 0.78),  # PSS 2 / 2
        workload.WayResult("engine_actors", 2, [9.0, 3.0, 3.0, 3.0], 40.0, 2 * gib, 0.79),  # 3.0 / 4.0
    ]
    rows = {row["way"]: row for row in workload.summarise(results)}
    assert rows["reference"]["round_ratio"] == 1.0 and rows["reference"]["s_per_round"] == 3.0
    assert rows["engine_actors"]["round_ratio"] == pytest.approx((0.5 + 0.75) / 2)
    assert rows["engine_actors"]["wall_ratio"] == pytest.approx((1.5 + 1.0) / 2)
    assert rows["engine_actors"]["pss_mib"] == 2048
    assert rows["engine_actors"]["pss_ratio"] == pytest.approx((1.25 + 1.0) / 2)
    assert rows["reference_procs"]["pss_ratio"] == 1.0 and rows["reference"]["pss_ratio"] == pytest.approx(0.5625)
    table = workload.format_table(workload.summarise(results))
    assert "| engine_actors | 2.000 s | 0.62 | 35.0 s | 1.25 | 2048 MiB | 1.12 | 0.790, 0.790 |" in table


def test_workload_refuses_an_unknown_way(capsys):
    assert workload.main(["--ways", "reference,flower"]) == 2
    known = "reference, reference_procs, engine_inprocess, engine_actors"
    assert f"unknown flower; known: {known}" in capsys.readouterr().err


def test_scaling_gives_every_client_the_same_work_and_samples_only_the_participants():
    shares = scaling.equal_shares(4000, 50)
    assert all(len(s) == scaling.SHARE == len(set(s.tolist())) for s in shares)
    assert all(s.max() < 4000 and np.all(np.diff(s) > 0) for s in shares)
    before = torch.get_num_threads()
    try:
        result = scaling.run_clients(clients=50, participating=2, rounds=2, actors=0, threads=1)
    finally:
        torch.set_num_threads(before)
    assert result["clients_per_round"] == [2, 2] and len(result["round_times"]) == 2


def test_scaling_ratios_divide_by_the_smallest_count_of_the_same_repetition():
    def row(rep, clients, per_round, pss):
        return {"rep": rep, "clients": clients, "participating": 10, "per_round": per_round, "peak_pss": pss}

    results = [row(1, 10, 1.0, 100), row(1, 1000, 1.1, 150), row(2, 10, 2.0, 100), row(2, 1000, 2.0, 110)]
    results = [{**r, "setup_s": 3.0} for r in results]
    rows = {r["clients"]: r for r in scaling.summarise(results)}
    assert rows[1000]["participation"] == 0.01 and rows[10]["round_ratio"] == 1.0
    assert rows[1000]["round_ratio"] == pytest.approx((1.1 + 1.0) / 2)
    assert rows[1000]["pss_ratio"] == pytest.approx((1.5 + 1.1) / 2)
    assert "| 1000 | 0.01 | 1.550 s | 1.05 |" in scaling.format_table(list(rows.values()))


def test_scaling_refuses_counts_below_the_participants(capsys):
    assert scaling.main(["--clients", "5,100", "--participating", "10"]) == 2
    assert "every count must be >= --participating=10" in capsys.readouterr().err


def test_the_study_benchmark_space_is_a_valid_search_space_without_early_stopping():
    space = SearchSpace.model_validate(study.study_space(trials=16, rounds=6, actors=2))
    assert space.tune.num_samples == 16 and space.tune.scheduler.asha is None and space.base.rounds == 6
    assert space.base.partition.val_fraction == 0.1  # tuning selects on validation data
    line = study.format_result(
        {"trials": 16, "rounds": 96, "wall_s": 120.0, "train_s": 100.0, "setup_s": 4.0, "overhead": 0.2}
        | {"peak_pss_mib": 3000.0}
    )
    assert "| 16 x 6 | 120.0 s | 100.0 s | 20 % | 4.0 s | 16.0 s |" in line
    json.dumps(study.study_space(2, 2, 0))  # the YAML written for tune.py is plain data


def test_the_study_overhead_splits_into_phases_that_add_up():
    stamped = [
        (0.5, "data: 10 clients"),
        (8.0, "=== variant fedprox (method fedprox) ==="),
        (20.0, "[fedprox] trial 1/3 finished: val_acc=0.5"),
        (25.5, "[fedprox] 1/3 trials ended"),  # a summary line: not a trial's end
        (27.0, "[fedprox] trial 2/3 finished: val_acc=0.6"),
        (33.5, "[fedprox] trial 3/3 finished: val_acc=0.7"),
    ]
    rows = [  # start order; only the first trial starts actors
        {"name": "fedprox-000", "train_s": 6.0, "setup_s": 2.5, "rounds": 6},
        {"name": "fedprox-001", "train_s": 6.5, "setup_s": 0.0, "rounds": 6},
        {"name": "fedprox-002", "train_s": 6.0, "setup_s": 0.0, "rounds": 6},
    ]
    phases = study.phases(stamped, rows, wall_s=36.0)
    # before 8; first trial 20 - 8 - 6 - 2.5 = 3.5; between (33.5 - 20) - 12.5 = 1.0; end 36 - 33.5 = 2.5
    assert phases == pytest.approx({"before": 8.0, "first_trial": 3.5, "actor_start": 2.5, "between": 1.0, "end": 2.5})
    assert sum(phases.values()) == pytest.approx(36.0 - 18.5)  # wall - train
    assert study.phases(stamped[:3], rows, wall_s=36.0) == {}  # a trial's line missing: no guess


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks machines without CUDA")
def test_bench_workload_on_cuda_without_a_gpu_says_so_instead_of_waiting():
    import subprocess

    from tests.support import REPO

    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.workload", "--device", "cuda"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "--device cuda: torch" in done.stderr and "sees no CUDA device" in done.stderr
