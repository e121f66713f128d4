"""Every device decision (raytune_fl/devices.py) and the GPU-minded engine paths, checked on the CPU: what each case of
the README's "What one trial reserves" table asks Ray for, the refusals, deterministic kernels, and that the pass-level
random draws and the pooling give exactly what they replaced."""

from __future__ import annotations

import os
import platform

import pytest
import torch
from torch import nn

from raytune_fl.config import ConfigError, ResourcesConfig, SearchSpace, override
from raytune_fl.devices import (
    CUBLAS_WORKSPACE,
    GpuShares,
    bf16_refusal,
    cpu_flags,
    cpu_has_bf16,
    gpu_shares,
    local_cpu_has_bf16,
    reproducible,
)
from raytune_fl.engine.augment import AugmentDraws, AugmentSpec, augment_batch
from raytune_fl.models.pooling import GlobalAvgPool2d
from raytune_fl.tune.resources import trial_bundles

R = ResourcesConfig


@pytest.mark.parametrize(
    ("resources", "shares", "bundles"),
    [
        # CPU machine: no GPU anywhere
        (R(), GpuShares(0, 0), [{"CPU": 0}, {"CPU": 1}, {"CPU": 1}]),
        # one GPU, 4 actors and the driver at a fifth each
        (R(actors=4, gpus_per_actor=0.2), GpuShares(0.2, 0.2), [{"CPU": 0, "GPU": 0.2}] + [{"CPU": 1, "GPU": 0.2}] * 4),
        # the driver's share set apart from the actors'
        (R(actors=2, gpus_per_actor=0.4, driver_gpus=0.1), GpuShares(0.1, 0.4),
         [{"CPU": 0, "GPU": 0.1}] + [{"CPU": 1, "GPU": 0.4}] * 2),
        # evaluation kept on the CPU
        (R(actors=2, gpus_per_actor=0.5, driver_gpus=0), GpuShares(0, 0.5),
         [{"CPU": 0}] + [{"CPU": 1, "GPU": 0.5}] * 2),
        # in-process: the trial's own bundle takes gpus_per_actor (4 such trials share one GPU)
        (R(actors=0, gpus_per_actor=0.25, cpus_per_actor=2), GpuShares(0.25, 0), [{"CPU": 2, "GPU": 0.25}]),
        (R(actors=0, driver_cpus=2), GpuShares(0, 0), [{"CPU": 2}]),
    ],
)  # fmt: skip
def test_what_one_trial_reserves(resources, shares, bundles):
    assert gpu_shares(resources) == shares
    assert trial_bundles(resources) == bundles


def test_a_gpu_share_nobody_would_use_or_cuda_without_a_reservation_is_refused_by_field():
    space = SearchSpace.model_validate({"name": "x", "base": {}, "variants": {"a": {"method": "fedavg"}}})
    with pytest.raises(ConfigError, match=r"base.resources.*driver_gpus: 0.5 with actors: 0"):
        override(space, {"base.resources.actors": 0, "base.resources.driver_gpus": 0.5}, source="test")
    with pytest.raises(ConfigError, match=r"base.resources.*device: 'cuda' needs a GPU that Ray reserves"):
        override(space, {"base.resources.device": "cuda"}, source="test")
    with pytest.raises(ConfigError, match=r"driver_gpus"):
        override(space, {"base.resources.driver_gpus": 0.00001}, source="test")
    assert override(space, {"base.resources.device": "cuda", "base.resources.gpus_per_actor": 0.5}, source="test")


AVX512 = {"sse4_2", "avx2", "avx512f", "avx512bw", "avx512vl", "avx512dq"}


@pytest.mark.parametrize(
    ("flags", "machine", "bf16"),
    [
        (AVX512, "x86_64", True),  # AVX-512 core: oneDNN's bf16 kernels (emulated through fp32)
        (AVX512 | {"avx512_bf16", "amx_bf16"}, "x86_64", True),
        ({"sse4_2", "avx2", "fma"}, "x86_64", False),  # an AVX2-only CPU: the careless input's machine
        (AVX512 - {"avx512vl"}, "AMD64", False),  # Knights Landing's AVX-512 lacks VL, BW and DQ
        ({"avx2", "avx_ne_convert", "avx_vnni_int8"}, "x86_64", True),  # AVX2-VNNI-2 (Sierra Forest)
        ({"fp", "asimd", "bf16"}, "aarch64", True),
        ({"fp", "asimd"}, "aarch64", False),
        ({"avx512f"}, "ppc64le", None),  # another architecture: left to the trial's own check
    ],
)
def test_a_cpus_bf16_is_read_from_its_feature_flags(flags, machine, bf16):
    assert cpu_has_bf16(flags, machine) is bf16


def test_the_flags_say_what_torch_says_on_this_machine(tmp_path):
    # the driver never imports torch: its answer from /proc/cpuinfo must be the one the trial's torch gives
    if local_cpu_has_bf16() is None:
        pytest.skip(f"no readable CPU flags on {platform.machine()}")
    assert local_cpu_has_bf16() is bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f\n\nprocessor\t: 1\nflags\t\t: fpu avx2 avx512f\n")
    assert cpu_flags(info) == {"fpu", "avx2", "avx512f"} and cpu_flags(tmp_path / "none") is None


@pytest.mark.parametrize(
    ("precision", "resources", "bf16", "refused"),
    [
        ("bf16", R(), False, True),  # the careless input: every process of the trial on this CPU
        ("bf16", R(), True, False),
        ("bf16", R(), None, False),  # flags unreadable: the trial checks
        ("fp16", R(), False, False),  # fp16 autocast runs on every CPU
        ("bf16", R(actors=0, gpus_per_actor=0.5), False, False),  # all on a GPU: the trial checks its GPU
        ("bf16", R(actors=2, gpus_per_actor=0.5, driver_gpus=0), False, True),  # evaluation on the CPU
        ("bf16", R(actors=0, gpus_per_actor=0.5, device="cpu"), False, True),
    ],
)
def test_bf16_is_refused_before_ray_where_the_trials_compute_on_a_cpu_without_it(precision, resources, bf16, refused):
    refusal = bf16_refusal(precision, resources, bf16)
    assert (refusal is not None) is refused
    if refused:
        assert (
            refusal.startswith("precision: 'bf16' needs a CPU with bfloat16 kernels")
            and "use precision: fp32" in refusal
        )


def test_deterministic_kernels_switch_on_and_back_off(monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    try:
        reproducible(True)
        assert torch.are_deterministic_algorithms_enabled()
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == CUBLAS_WORKSPACE
        reproducible(False)  # a process reused by the next trial takes that trial's setting
        assert not torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(False)


def test_the_pooling_is_adaptive_average_pooling_to_the_bit_on_the_cpu():
    x = torch.randn(3, 5, 7, 6, generator=torch.Generator().manual_seed(0))
    assert torch.equal(GlobalAvgPool2d()(x), nn.AdaptiveAvgPool2d(1)(x))
    assert torch.allclose(GlobalAvgPool2d()(x), x.mean(dim=(2, 3), keepdim=True), atol=1e-6)


def test_a_pass_of_draws_gives_the_numbers_batch_by_batch_draws_gave():
    spec = AugmentSpec(crop_padding=2, horizontal_flip=True)
    x = torch.arange(5 * 2 * 4 * 4, dtype=torch.float32).view(5, 2, 4, 4)
    sizes = [2, 3]  # a pass of two batches, the second one larger
    one_by_one = torch.Generator().manual_seed(7)
    expected = [augment_batch(x[:2], spec, one_by_one), augment_batch(x[2:], spec, one_by_one)]
    passed = torch.Generator().manual_seed(7)
    draws = AugmentDraws.draw(spec, sizes, passed, torch.device("cpu"))
    assert torch.equal(draws.apply(x[:2], spec, 0), expected[0])
    assert torch.equal(draws.apply(x[2:], spec, 1), expected[1])
    assert torch.equal(torch.rand(4, generator=passed), torch.rand(4, generator=one_by_one))  # the stream after
    # a flip is a mirror: every flipped sample reads its own row backwards
    flips = AugmentDraws.draw(AugmentSpec(horizontal_flip=True), [5], torch.Generator().manual_seed(1), "cpu")
    out = flips.apply(x, AugmentSpec(horizontal_flip=True), 0)
    for i in range(5):
        assert torch.equal(out[i], x[i].flip(-1) if flips.flips[i] else x[i])
