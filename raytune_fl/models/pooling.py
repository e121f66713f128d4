"""Global average pooling that also runs under deterministic kernels on CUDA."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class GlobalAvgPool2d(nn.Module):
    """`nn.AdaptiveAvgPool2d(1)`, except on CUDA under `torch.use_deterministic_algorithms(True)`: there torch has no
    deterministic backward for adaptive average pooling (it raises), so the mean over H and W is taken instead (its
    backward is a broadcast: deterministic). Elsewhere the same kernel as before, so CPU runs are unchanged."""

    def forward(self, x: Tensor) -> Tensor:
        if x.is_cuda and torch.are_deterministic_algorithms_enabled():
            return x.mean(dim=(-2, -1), keepdim=True)
        return F.adaptive_avg_pool2d(x, 1)
