"""Where a trial computes: every device decision of the package, in one module.

Three questions:
- what the trial's bundles ask Ray for (`gpu_shares`: the driver's and each actor's GPU share), decided on the
  driver, without torch, from `resources` alone;
- what a process that computes uses (`choose_device`), decided where it runs, from the setting and whether Ray gave
  it a GPU: CUDA only on a GPU Ray reserved, so trials never share a GPU unaccounted;
- whether a CPU runs bf16 (`cpu_has_bf16`, a pure function of its feature flags): the driver refuses `precision: bf16`
  before Ray starts where the trials compute on this machine's CPU (`bf16_refusal`), as the trial would.

`reproducible` turns deterministic kernels on or off in a process that computes (the trial and every actor).
Light to import: torch is imported inside the functions that need it.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from raytune_fl.errors import RaytuneFLError

if TYPE_CHECKING:
    from raytune_fl.config import ResourcesConfig


class DeviceError(RuntimeError, RaytuneFLError):
    pass


@dataclass(frozen=True)
class GpuShares:
    driver: float  # the trial's own bundle: the round driver (evaluation), or the clients too with actors: 0
    actor: float  # each client actor's bundle


def gpu_shares(resources: ResourcesConfig) -> GpuShares:
    """The GPU fractions a trial reserves (docs/how-to/cluster.md, "What one trial reserves").

    actors: 0 -> the trial's bundle takes `gpus_per_actor`: its clients train and are evaluated there.
    actors > 0 -> each actor takes `gpus_per_actor`; the driver takes `driver_gpus`, by default the same share as one
    actor when the actors have GPUs (evaluation runs the same model forward: the GPU, not one CPU thread), else 0.
    """
    if resources.actors == 0:
        return GpuShares(driver=resources.gpus_per_actor, actor=0.0)
    driver = resources.driver_gpus
    if driver is None:
        driver = resources.gpus_per_actor
    return GpuShares(driver=driver, actor=resources.gpus_per_actor)


def choose_device(setting: str, has_gpu: bool, where: str = "") -> str:
    """`resources.device` for a process that Ray gave a GPU (`has_gpu`) or not.

    auto: CUDA where Ray assigned a GPU and torch can use it, else CPU; cuda: the same, but a clear error where torch
    sees no CUDA device; cpu: CPU. A process without a GPU share computes on the CPU under every setting: on a GPU
    node it still sees the GPUs, and would share them unreserved (config makes `cuda` reserve GPUs).
    """
    if setting == "cpu":
        return "cpu"
    import torch

    cuda = torch.cuda.is_available()
    if setting == "cuda" and not cuda:
        raise DeviceError(
            f"resources.device: 'cuda' but torch sees no CUDA device{where} (torch {torch.__version__}, "
            f"CUDA build {torch.version.cuda or 'none'}); use device: auto or cpu"
        )
    return "cuda" if cuda and has_gpu else "cpu"


# oneDNN's own test for bf16 kernels, which torch asks (torch.ops.mkldnn._is_mkldnn_bf16_supported): on x86, AVX-512
# core (F, BW, VL, DQ: bf16 emulated through fp32, native with avx512_bf16 or AMX) or AVX2-VNNI-2 (avx_ne_convert
# with avx_vnni_int8); on Arm, the BF16 extension
X86_BF16 = (frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq"}), frozenset({"avx_ne_convert", "avx_vnni_int8"}))
ARM_BF16 = frozenset({"bf16"})


def cpu_has_bf16(flags: Collection[str], machine: str) -> bool | None:
    """Whether a CPU with these feature `flags` (/proc/cpuinfo's `flags`, or `Features` on Arm) and `machine`
    (platform.machine()) runs torch's bf16 CPU kernels; None where the architecture is neither x86-64 nor Arm."""
    if machine.lower() in ("x86_64", "amd64"):
        return any(needed <= set(flags) for needed in X86_BF16)
    if machine.lower() in ("aarch64", "arm64"):
        return ARM_BF16 <= set(flags)
    return None


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str] | None:
    """This machine's CPU feature flags, read without torch (the driver stays light); None where not readable."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return None


# what a bf16 refusal says, before Ray (bf16_refusal) and in the trial (engine/precision.py): one text
BF16_CPUS = "AVX-512 or AVX2-VNNI-2 on x86, BF16 on Arm"
BF16_INSTEAD = "use precision: fp32, or fp16 (a gradient scaler keeps its small gradients)"


def bf16_refusal(precision: str, resources: ResourcesConfig, bf16: bool | None) -> str | None:
    """The first line refusing `precision` where trials compute on a CPU whose bf16 capability is `bf16`
    (cpu_has_bf16 of the trials' node), or None: not bf16, no process of the trial on the CPU, or not known."""
    if precision != "bf16" or bf16 is not False:
        return None
    shares = gpu_shares(resources)
    on_cpu = resources.device == "cpu" or shares.driver == 0 or (resources.actors > 0 and shares.actor == 0)
    if not on_cpu:
        return None  # a GPU's capability is the trial's to check (engine/precision.py), on its node
    return (
        f"precision: 'bf16' needs a CPU with bfloat16 kernels ({BF16_CPUS}) and this machine's, where the trials "
        f"compute, has none; {BF16_INSTEAD}, or run on a cluster (--address) whose nodes have bf16 or GPUs"
    )


def local_cpu_has_bf16() -> bool | None:
    """cpu_has_bf16 of this machine; None where its flags cannot be read."""
    flags = cpu_flags()
    return None if flags is None else cpu_has_bf16(flags, platform.machine())


# cuBLAS needs a fixed workspace for reproducible matrix products on CUDA >= 10.2 (read at cuBLAS's first use)
CUBLAS_WORKSPACE = ":4096:8"


def reproducible(deterministic: bool) -> None:
    """`reproducibility.deterministic` in this process: deterministic kernels, or torch's defaults.

    On: `torch.use_deterministic_algorithms(True)` (an op without a deterministic kernel raises, naming itself),
    cuDNN's autotuner off, and CUBLAS_WORKSPACE_CONFIG set if the user has not set it. Off: torch's defaults, so a
    process reused by a later trial does not keep an earlier trial's setting.
    """
    import torch

    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    if (
        torch.are_deterministic_algorithms_enabled() != deterministic
    ):  # the call costs ~1.5 s of imports: only on change
        torch.use_deterministic_algorithms(deterministic)
    torch.backends.cudnn.benchmark = False
