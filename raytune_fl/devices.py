"""Where a trial computes: every device decision of the package, in one module.

Two questions, two functions:
- what the trial's bundles ask Ray for (`gpu_shares`: the driver's and each actor's GPU share), decided on the
  driver, without torch, from `resources` alone;
- what a process that computes uses (`choose_device`), decided where it runs, from the setting and whether Ray gave
  it a GPU: CUDA only on a GPU Ray reserved, so trials never share a GPU unaccounted.

`reproducible` turns deterministic kernels on or off in a process that computes (the trial and every actor).
Light to import: torch is imported inside the functions that need it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
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
