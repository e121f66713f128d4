"""benchmarks/gpu.py on a machine without a GPU: it refuses clearly, and its table, targets, configs and child
handling are checked by hand here, so a typo fails on the CPU and not in the GPU's few minutes. (The run itself
is `python -m benchmarks.gpu --device cpu --tiny` by hand: a rehearsal of every row on the CPU, minutes.)"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import torch

from benchmarks import gpu, reference
from raytune_fl.config import ExperimentConfig, SearchSpace
from tests.support import REPO

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks machines without CUDA")


@no_cuda
def test_without_cuda_it_says_so_and_exits_2_before_running_anything(tmp_path):
    out = tmp_path / "rows.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu", "--json", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("gpu_check: no CUDA GPU here (torch ")
    assert not out.exists()  # nothing ran, nothing written


@no_cuda
def test_the_plain_loop_on_cuda_refuses_without_cuda(capsys):
    assert reference.main(["--device", "cuda"]) == 2
    assert "--device cuda: torch" in capsys.readouterr().err


def test_an_unknown_part_is_refused(capsys):
    assert gpu.main(["--only", "workload,flops"]) == 2
    known = "tests, workload, workload_batched, cross_device, resnet, resnet_batched, study"
    assert f"--only: unknown flops; known: {known}" in capsys.readouterr().err
    assert gpu.parse_only("study,workload", skip_tests=False) == ["workload", "study"]  # always in run order
    assert gpu.parse_only(None, skip_tests=True) == [
        "workload",
        "workload_batched",
        "cross_device",
        "resnet",
        "resnet_batched",
        "study",
    ]


def test_rows_ratios_and_targets_by_hand(tmp_path):
    machine = "NVIDIA H200"
    loop = gpu.workload_row(
        "plain loop (CUDA)", machine, {"round_times": [3.0, 0.40, 0.44, 0.38], "test_acc": [0.8]}, 9.0, None
    )
    assert loop["s_per_round"] == 0.40  # median of rounds 2..4: 0.40, 0.44, 0.38
    reference_s = loop["s_per_round"]
    # in-process: median 0.43 -> 0.43 / 0.40 = 1.075 > 1.05: MISS
    inproc = gpu.workload_row(
        "engine in-process", machine, {"round_times": [5, 0.43, 0.45, 0.42], "test_acc": [0.79]}, 12.0, reference_s
    )
    gpu.set_target(inproc, "ratio", "<=", gpu.IN_PROCESS_MAX)
    assert inproc["ratio"] == pytest.approx(1.075) and inproc["result"] == "MISS"
    # 4 actors: median 0.42 -> 1.05 <= 1.10: PASS
    actors = gpu.workload_row(
        "engine, 4 actors", machine, {"round_times": [8, 0.42, 0.41, 0.50], "test_acc": [0.78]}, 20.0, reference_s
    )
    gpu.set_target(actors, "ratio", "<=", gpu.ACTORS_MAX)
    assert actors["ratio"] == pytest.approx(1.05) and actors["result"] == "PASS"
    # ResNet: rounds 2..3 train 2.0 - 0.3 - 0.1 = 1.6 and 2.2 - 0.5 - 0.1 = 1.6; eval 0.3, 0.5; shares 18.75 %, 31.25 %
    report = {
        "round_times": [9.0, 2.1, 2.3],
        "round_time_s": [8.5, 2.0, 2.2],
        "evaluate_s": [1.0, 0.3, 0.5],
        "aggregate_s": [0.1, 0.1, 0.1],
        "test_acc": [0.3, 0.5, 0.6],
    }
    resnet = gpu.set_target(gpu.resnet_row("resnet18, 4 actors", machine, report, 30.0), "eval_share", "<=", 0.2)
    assert resnet["train_s"] == pytest.approx(1.6) and resnet["eval_s"] == pytest.approx(0.4)
    assert resnet["eval_share"] == pytest.approx(0.25) and resnet["result"] == "MISS"
    assert resnet["s_per_round"] == pytest.approx(2.2)
    one = gpu.study_row("8 trials x 4 rounds, 1 at a time", machine, 90.0, 8, 32)
    four = gpu.set_target(
        gpu.study_row("8 trials x 4 rounds, 4 at once", machine, 40.0, 8, 32, 90.0), "speedup", ">=", 2.0
    )
    assert one["speedup"] is None and four["speedup"] == pytest.approx(2.25) and four["result"] == "PASS"
    broken = gpu.failed_row("workload", "engine, 2 actors", machine, "exited with 1", 4.0)
    unjudged = gpu.set_target(gpu.workload_row("engine, 4 actors", machine, report, 1.0, None), "ratio", "<=", 1.1)
    assert unjudged["result"] == "n/a"  # no plain loop to divide by: neither PASS nor MISS

    table = gpu.format_table([loop, inproc, actors, resnet, one, four, broken]).splitlines()
    assert table[2] == "| workload | plain loop (CUDA) | NVIDIA H200 | 0.400 s | — | — | — | — | 9.0 s | — | — |  |  |"
    assert "| engine in-process | NVIDIA H200 | 0.430 s | 1.07x |" in table[3] and table[3].endswith(
        "| x plain ≤ 1.05 | MISS |"
    )
    assert table[4].endswith("| 1.05x | — | — | — | 20.0 s | — | — | x plain ≤ 1.10 | PASS |")
    assert table[5].endswith("| 2.200 s | — | 1.600 s | 0.400 s | 25.0 % | 30.0 s | — | — | eval/train ≤ 20 % | MISS |")
    assert table[6].endswith("| 90.0 s | — | — |  |  |")
    assert table[7].endswith("| 40.0 s | — | 2.25x | speed-up ≥ 2.0x | PASS |")
    assert table[8].endswith("| 4.0 s | — | — |  | FAIL |")

    # client batching: K = 10 at 0.19 s/round is 0.475x the plain loop (PASS against 0.5) and 2x K = 1's 0.38 s
    batched = {"round_times": [4.0, 0.19, 0.20, 0.18], "test_acc": [0.7], "peak_gpu_mib": 812.4, "client_batch": 10}
    k10 = gpu.workload_row("engine in-process, K=10", machine, batched, 11.0, reference_s, "workload_batched", 0.38)
    gpu.set_target(k10, "ratio", "<=", gpu.BATCHED_MAX)
    assert k10["ratio"] == pytest.approx(0.475) and k10["speedup"] == pytest.approx(2.0) and k10["result"] == "PASS"
    line = gpu.format_table([k10]).splitlines()[2]
    assert line.endswith("| 0.190 s | 0.47x | — | — | — | 11.0 s | 812 MiB | 2.00x | x plain ≤ 0.50 | PASS |")
    assert k10["part"] == "workload_batched" and k10["client_batch"] == 10
    assert gpu.resnet_row("resnet18 in-process, K=10", machine, report, 9.0, "resnet_batched", 4.4)["speedup"] == 2.0

    recorder = gpu.Recorder(str(tmp_path / "rows.json"))
    recorder.add(loop)
    assert json.loads((tmp_path / "rows.json").read_text())[0]["s_per_round"] == 0.40  # on disk at once
    recorder.add(broken)
    assert [r["name"] for r in json.loads((tmp_path / "rows.json").read_text())] == [loop["name"], broken["name"]]
    assert recorder.failed == [broken]


def test_cross_device_rows_by_hand():
    """benchmarks/cross_device.py's summary as rows: the speed-up over pfl is pfl's time over the way's, and the
    target sits on the engine's fastest way; without a pfl row it cannot be judged."""
    summary = {
        "rows": [
            {"way": "plain", "s_per_round": 0.50, "plain_ratio": 1.0, "pfl_ratio": 0.5, "final_acc": [0.11]},
            {"way": "actors_sums", "s_per_round": 0.40, "plain_ratio": 0.8, "pfl_ratio": 0.4, "final_acc": [0.12]},
            {"way": "batched K=10", "s_per_round": 0.25, "plain_ratio": 0.5, "pfl_ratio": 0.25, "final_acc": [0.1]},
            {"way": "pfl", "s_per_round": 1.00, "plain_ratio": 2.0, "pfl_ratio": 1.0, "final_acc": [0.1]},
        ]
    }
    rows = {row["way"]: row for row in gpu.cross_device_rows("NVIDIA H200", summary)}
    assert rows["batched K=10"]["speedup"] == pytest.approx(4.0) and rows["batched K=10"]["result"] == "PASS"
    assert rows["actors_sums"]["speedup"] == pytest.approx(2.5) and rows["actors_sums"]["target"] is None
    assert rows["plain"]["target"] is None and rows["pfl"]["speedup"] == pytest.approx(1.0)
    line = gpu.format_table([rows["batched K=10"]]).splitlines()[2]
    assert line == (
        "| cross_device | cross-device: batched K=10 | NVIDIA H200 | 0.250 s | 0.50x | — | — | — | — | — | 4.00x "
        "| speed-up ≥ 3.0x | PASS |"
    )
    no_pfl = {"rows": [{**row, "pfl_ratio": float("nan")} for row in summary["rows"] if row["way"] != "pfl"]}
    judged = {row["way"]: row for row in gpu.cross_device_rows("NVIDIA H200", no_pfl)}
    assert judged["batched K=10"]["speedup"] is None and judged["batched K=10"]["result"] == "n/a"


def test_a_child_that_fails_or_hangs_gives_its_tail_and_is_ended():
    failed = gpu.run_child(
        [sys.executable, "-c", "import sys; print('half'); sys.stderr.write('boom'); sys.exit(3)"], 30
    )
    with pytest.raises(gpu.ChildError, match=r"exited with 3; output tail:\nboom"):
        failed.report()
    # a child that started a grandchild and hangs: the whole group ends at the timeout
    sleep = "import time; time.sleep(60)"
    hang = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {sleep!r}]); time.sleep(60)"
    hung = gpu.run_child([sys.executable, "-c", hang], 1.5)
    assert hung.timed_out and hung.wall_s < 10
    with pytest.raises(gpu.ChildError, match="timed out after"):
        hung.report()
    done = gpu.run_child([sys.executable, "-c", "print('noise'); print('{\"round_times\": [1.0]}')"], 30)
    assert done.report() == {"round_times": [1.0]} and not math.isnan(done.wall_s)


def test_the_benchmark_configs_validate():
    for sizes in (gpu.FULL, gpu.TINY):
        device = "cuda" if sizes is gpu.FULL else "cpu"
        for actors in sizes.resnet_actors:
            experiment = ExperimentConfig.model_validate(gpu.resnet_experiment(sizes, actors, device))
            assert experiment.model == "resnet18" and experiment.dataset == "synthetic"
            assert experiment.synthetic.samples == sizes.resnet_samples and experiment.resources.actors == actors
        for k in sizes.resnet_client_batches:  # resnet_batched: in-process, the whole GPU
            experiment = ExperimentConfig.model_validate(gpu.resnet_experiment(sizes, 0, device, k))
            assert experiment.resources.actors == 0 and experiment.resources.client_batch == k
            assert experiment.resources.gpus_per_actor == (1.0 if device == "cuda" else 0.0)
        assert 1 in sizes.client_batches and 1 in sizes.resnet_client_batches  # the speed-ups' baseline
        for concurrent in (1, sizes.study_concurrent):
            space = SearchSpace.model_validate(gpu.study_space(sizes, concurrent, device))
            assert space.tune.max_concurrent == concurrent and space.tune.scheduler.asha is None
            assert space.tune.num_samples == sizes.study_trials and space.base.rounds == sizes.study_rounds
            assert space.base.resources.actors == 0
    full = ExperimentConfig.model_validate(gpu.resnet_experiment(gpu.FULL, 4, "cuda"))
    assert full.synthetic.shape == (3, 32, 32) and full.partition.clients == 10 and full.rounds == 3
    assert full.resources.gpus_per_actor == 0.25 and full.resources.device == "cuda"
    study = SearchSpace.model_validate(gpu.study_space(gpu.FULL, 4, "cuda"))
    assert study.base.resources.gpus_per_actor == 0.25 and study.base.resources.device == "cuda"


def test_the_gpu_test_files_it_runs_exist():
    """A moved GPU test would otherwise be found missing only in a lent GPU's few minutes."""
    assert gpu.GPU_TESTS and all((REPO / path).is_file() for path in gpu.GPU_TESTS), gpu.GPU_TESTS
