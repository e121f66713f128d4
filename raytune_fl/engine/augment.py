"""Training-time batch augmentation on tensors, per batch on the client's device.

Randomness is per sample and comes only from the generator the local loop passes in (a CPU
``torch.Generator``, drawn a pass at a time: ``AugmentDraws``), so a trial replays exactly, on any device.
Draw order per batch: crop offsets (rows, then columns), then the flip mask. With every option off
the input is returned as is and nothing is drawn, so switching augmentation off leaves training
bit-identical. Never used for evaluation.

Random crop pads with constant zeros, as torchvision's ``RandomCrop(size, padding=p)`` does. The
datasets here are normalised, so zero is the dataset mean intensity rather than black; zero padding
also works for any padding, whereas reflect padding needs ``p`` below the image size.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor


@dataclass(frozen=True)
class AugmentSpec:
    crop_padding: int = 0  # random crop back to the input size after zero-padding every side by this much; 0 = off
    horizontal_flip: bool = False  # mirror each sample left-right with probability 1/2

    def __post_init__(self) -> None:
        if self.crop_padding < 0:
            raise ValueError(f"crop_padding must be >= 0, got {self.crop_padding}")

    @property
    def active(self) -> bool:
        return self.crop_padding > 0 or self.horizontal_flip


def augment_batch(x: Tensor, spec: AugmentSpec, generator: torch.Generator) -> Tensor:
    """Augment a batch ``(B, ..., H, W)``; each sample gets its own crop offset and flip draw.

    Returns ``x`` itself (no draws) when ``spec`` is all off. Otherwise a new tensor of the same
    shape, dtype and device as ``x``.
    """
    if not spec.active:
        return x
    draws = AugmentDraws.draw(spec, [x.shape[0]], generator, x.device)
    return draws.apply(x, spec, 0)


@dataclass(frozen=True)
class AugmentDraws:
    """The random numbers of a pass's batches, drawn on the CPU generator in the per-batch order (crop rows, crop
    columns, flips; then the next batch) and moved to the training device in one copy per pass instead of one per
    step: the same numbers as drawing batch by batch, so CPU and GPU runs of a seed see the same augmentation."""

    offsets: Tensor  # (2, sum of the batch sizes): crop row and column offsets, batch after batch; empty if no crop
    flips: Tensor  # (sum of the batch sizes,) bool; empty if no flip
    starts: tuple[int, ...]  # where each batch's numbers begin

    @staticmethod
    def draw(spec: AugmentSpec, sizes: list[int], generator: torch.Generator, device: torch.device) -> AugmentDraws:
        offsets, flips, starts, at = [], [], [], 0
        for size in sizes:
            if spec.crop_padding:
                offsets.append(
                    torch.randint(0, 2 * spec.crop_padding + 1, (2, size), generator=generator, device="cpu")
                )
            if spec.horizontal_flip:
                flips.append(torch.rand(size, generator=generator, device="cpu") < 0.5)
            starts.append(at)
            at += size
        cpu = torch.device("cpu")
        return AugmentDraws(
            (torch.cat(offsets, dim=1) if offsets else torch.empty(2, 0, dtype=torch.long, device=cpu)).to(device),
            (torch.cat(flips) if flips else torch.empty(0, dtype=torch.bool, device=cpu)).to(device),
            tuple(starts),
        )

    def apply(self, x: Tensor, spec: AugmentSpec, batch: int) -> Tensor:
        """Augment `x`, the pass's batch number `batch`, with its numbers."""
        if not spec.active:
            return x
        if x.dim() < 3:
            raise ValueError(f"expected a batch (B, ..., H, W), got shape {tuple(x.shape)}")
        begin, end = self.starts[batch], self.starts[batch] + x.shape[0]
        if spec.crop_padding:
            x = _random_crop(x, spec.crop_padding, self.offsets[:, begin:end])
        if spec.horizontal_flip:
            flip = self.flips[begin:end].view(-1, *([1] * (x.dim() - 1)))
            x = torch.where(flip, x.flip(-1), x)
        return x


def _random_crop(x: Tensor, padding: int, offsets: Tensor) -> Tensor:
    """Zero-pad by ``padding`` on every side, then cut an HxW window at a per-sample offset in [0, 2p]."""
    batch, height, width = x.shape[0], x.shape[-2], x.shape[-1]
    padded = F.pad(x, (padding,) * 4)  # zeros on every side, as RandomCrop(padding=p)  # (B, ..., H + 2p, W + 2p)
    lead = [1] * (x.dim() - 3)  # broadcast the per-sample indices over channel (and any other) dims
    rows = offsets[0].view(-1, 1) + _arange(height, x.device)  # (B, H)
    rows = rows.view(batch, *lead, height, 1).expand(*padded.shape[:-2], height, padded.shape[-1])
    padded = padded.gather(-2, rows)  # (B, ..., H, W + 2p)
    cols = offsets[1].view(-1, 1) + _arange(width, x.device)  # (B, W)
    cols = cols.view(batch, *lead, 1, width).expand(*padded.shape[:-1], width)
    return padded.gather(-1, cols)  # (B, ..., H, W)


@functools.lru_cache(maxsize=8)  # the image size: the same at every step
def _arange(size: int, device: torch.device) -> Tensor:
    return torch.arange(size, device=device)
