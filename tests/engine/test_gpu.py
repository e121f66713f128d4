"""The real GPU path (skipped without CUDA): the benchmark workload (docs/explanation/workload.md) run with 4 client
actors sharing one GPU (0.25 each) against the same run on CPU actors. Run on a GPU machine with
`python -m pytest -q tests/engine/test_gpu.py`."""

from __future__ import annotations

import json
import subprocess

import pytest
import torch

from benchmarks.proc import python_module

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

# Same seed, other kernels: cuDNN's convolutions sum in another order than the CPU's, so the runs agree to
# rounding in round 1 and then drift as any two float orders do (training amplifies). Five seeds of this workload
# on CPU spread by sd 0.027 in final accuracy (issue 7's measurement); 0.05 is about two of those.
FINAL_ACC_TOLERANCE = 0.05


def _workload(device: str, actors: int) -> dict:
    command = python_module(
        "benchmarks.workload", "--child", "engine_actors", "--actors", str(actors), "--device", device
    )
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_workload_on_four_quarter_gpu_actors_learns_as_on_cpu():
    gpu, cpu = _workload("cuda", 4), _workload("cpu", 4)
    assert gpu["placed"] == [["cuda", "0"]]  # every client trained on CUDA, all four actors on Ray's GPU 0
    assert cpu["placed"] == [["cpu", ""]]
    assert len(gpu["test_acc"]) == len(cpu["test_acc"]) == 6
    assert gpu["test_acc"][0] == pytest.approx(cpu["test_acc"][0], abs=0.02)
    assert gpu["test_acc"][-1] == pytest.approx(cpu["test_acc"][-1], abs=FINAL_ACC_TOLERANCE)
    assert gpu["test_acc"][-1] > 0.5  # it learned: docs/explanation/workload.md#expected-accuracy ends near 0.78


def _digits(deterministic: bool, rounds: int = 2):
    from raytune_fl.config import ExperimentConfig

    return ExperimentConfig.model_validate(
        {
            "dataset": "digits",
            "partition": {"kind": "dirichlet", "alpha": 0.3, "clients": 4, "min_size": 20, "seed": 1},
            "rounds": rounds,
            "batch_size": 32,
            "augment": {"crop_padding": 1, "horizontal_flip": True},
            "resources": {"actors": 0, "gpus_per_actor": 1, "device": "cuda"},
            "reproducibility": {"deterministic": deterministic},
        }
    )


def _learning_curve(deterministic: bool) -> list[dict]:
    from raytune_fl.engine.federation import Federation

    rows: list[dict] = []
    federation = Federation(_digits(deterministic), "feduv", {"mu": 0.5}, device="cuda")
    assert federation.evaluator.val_x.is_cuda and federation.evaluator.test_x.is_cuda  # uploaded once, evaluated there
    federation.run(rows.append)
    return [{k: v for k, v in row.items() if not k.endswith("_s") and isinstance(v, float)} for row in rows]


def test_deterministic_kernels_make_two_gpu_runs_bit_identical():
    try:
        first, second = _learning_curve(True), _learning_curve(True)
    finally:
        torch.use_deterministic_algorithms(False)
    assert first == second
    # it trained: the model moved between the rounds (2 rounds on 8x8 digits do not get far above chance; an
    # H200 run gave test_acc 0.089 twice, bit for bit)
    assert first[0]["val_loss"] != first[1]["val_loss"] and first[0]["train_loss"] != first[1]["train_loss"]


def test_gradient_norms_are_measured_on_the_gpu_as_on_the_cpu():
    """diagnostics.gradient_norms on CUDA: the probe's sums live on the training device; round 1's norms (the same
    weights and batches on both devices, before float orders drift apart) agree with the CPU's to rounding."""
    from raytune_fl.engine.federation import Federation

    base = _digits(False, rounds=1)
    experiment = base.model_copy(
        update={"diagnostics": base.diagnostics.model_copy(update={"gradient_norms": True, "every": 1})}
    )
    rows = {}
    for device in ("cpu", "cuda"):
        found: list[dict] = []
        Federation(experiment, "univarfl", {}, device=device).run(found.append)
        rows[device] = {k: v for k, v in found[0].items() if k.startswith("grad_")}
    assert {"grad_norm_ce", "grad_norm_variance", "grad_norm_energy", "grad_cos_energy"} <= rows["cuda"].keys()
    for name, value in rows["cpu"].items():
        # a cosine near 0 (near-orthogonal gradients) moves by the kernels' rounding over the norm: an H200 gave
        # 0.0005 on the CPU, -0.002 on CUDA (TF32 convolutions)
        assert rows["cuda"][name] == pytest.approx(value, rel=0.05, abs=0.01 if "cos" in name else 1e-3), name
