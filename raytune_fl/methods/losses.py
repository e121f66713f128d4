"""Stateless, differentiable local regularisers (see docs/explanation/methods.md#local-objectives).

- ``classifier_variance``: FedUV / UniVarFL ``L_V`` (hinge on the per-class spread of softmax outputs).
- ``rbf_uniformity``: FedUV ``L_U`` (Gaussian-kernel uniformity of the representation).
- ``hyperspherical_energy``: UniVarFL ``L_HE``.
- ``proximal``: FedProx ``0.5 * ||w - w_t||^2`` (the caller multiplies by ``mu``).
- ``margin_control``: FedLD's margin term ``log(1 + ||.||^2)`` (paper: per-sample logits; official: softmax).
- ``decorrelation``: FedDecorr's penalty on the correlations between the columns of z (official or paper scale).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterable
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

Statistic = Literal["std", "var"]
Hinge = Literal["linear", "squared", "none"]
MarginForm = Literal["paper", "official"]
DecorrForm = Literal["official", "paper"]

# Floor under the RBF bandwidth: keeps the division finite on a collapsed batch (all rows identical).
_MIN_SIGMA = 1e-12


def _require_batch(x: Tensor, name: str) -> None:
    if x.dim() != 2:
        raise ValueError(f"{name} must be 2-D (n x features), got shape {tuple(x.shape)}")
    if x.shape[0] < 2:
        raise ValueError(f"{name} needs a batch of at least 2 samples (batch statistics), n={x.shape[0]}")


def _spread(x: Tensor, statistic: Statistic) -> Tensor:
    """Unbiased per-column std or var over dim 0 (torch default, as in the official FedUV code).

    ``torch.std`` has a NaN gradient when a column is constant (0/0 in d sqrt). We take
    sqrt(clamp(var, finfo.tiny)) instead: the value moves by at most sqrt(tiny) (~1e-19 in float32)
    and the gradient is finite (zero) when the column has collapsed.
    """
    var = x.var(dim=0, unbiased=True)
    if statistic == "var":
        return var
    if statistic == "std":
        return var.clamp_min(torch.finfo(var.dtype).tiny).sqrt()
    raise ValueError(f"statistic must be 'std' or 'var', got {statistic!r}")


@functools.lru_cache(maxsize=64)  # a constant per (classes, statistic): computed once, not at every step
def identity_spread(num_classes: int, statistic: Statistic) -> float:
    """Target ``c``: the statistic of the columns of the DxD identity, averaged over columns.

    Computed like the official FedUV code (``torch.eye(D).std(dim=0).mean()``); it equals
    1/sqrt(D) for std and 1/D for var.
    """
    if num_classes < 2:
        raise ValueError(f"num_classes must be >= 2, got {num_classes}")
    eye = torch.eye(num_classes, dtype=torch.float64, device="cpu")  # a Python float comes out: no device needed
    return float(_spread(eye, statistic).mean())


def classifier_variance(logits: Tensor, statistic: Statistic = "std", hinge: Hinge = "linear") -> Tensor:
    """``L_V = mean_j h(c - s_j)`` with ``s_j`` the spread of ``softmax(logits)[:, j]`` over the batch.

    ``statistic``: "std" (FedUV) or "var" (UniVarFL). ``hinge``: "linear" (papers), "squared" or
    "none" (ablations from the FedUV appendix).
    """
    _require_batch(logits, "logits")
    probs = F.softmax(logits, dim=1)
    gap = identity_spread(logits.shape[1], statistic) - _spread(probs, statistic)
    if hinge == "linear":
        return F.relu(gap).mean()
    if hinge == "squared":
        return F.relu(gap).pow(2).mean()
    if hinge == "none":
        return gap.mean()
    raise ValueError(f"hinge must be 'linear', 'squared' or 'none', got {hinge!r}")


def _pairwise_sq_distances(z: Tensor, exact: bool = False) -> Tensor:
    """Squared distances ||z_i - z_j||^2 for pairs i<j (flattened, row-major like ``torch.pdist``).

    No sqrt anywhere, so the gradient stays finite when two rows coincide (``pdist(...)**2`` would go
    through d sqrt(0) = inf). By default from the Gram matrix, ||z_i||^2 + ||z_j||^2 - 2 z_i.z_j clamped
    at 0: one matmul, about 20x faster than explicit differences on a 64 x 256 batch, with a relative error
    of ~1e-6 instead of ~1e-7 (float32). ``exact``: explicit differences, so coinciding rows give exactly 0
    (what dropping zero distances needs).
    """
    i, j = _pair_indices(z.shape[0], z.device)
    if exact:
        return (z[i] - z[j]).pow(2).sum(dim=1)
    norms = z.pow(2).sum(dim=1)
    return (norms.unsqueeze(1) + norms.unsqueeze(0) - 2.0 * (z @ z.T)).clamp_min(0.0)[i, j]


@functools.lru_cache(maxsize=16)  # the same batch size at almost every step
def _pair_indices(n: int, device: torch.device) -> Tensor:
    return torch.triu_indices(n, n, offset=1, device=device)


def median_sq_distance(z: Tensor, *, detach: bool = True, drop_zeros: bool = False) -> Tensor:
    """Median of the squared pairwise distances (pairs i<j); by default detached, over all pairs (the paper).

    ``torch.median`` returns the lower of the two middle values for an even count, as in the official
    FedUV code. That code keeps the median in the graph (``detach=False``) and drops zero distances
    (coincident rows) first (``drop_zeros=True``); if every distance is zero the median is 0.
    """
    _require_batch(z, "z")
    return _median(_pairwise_sq_distances(z.detach() if detach else z, exact=drop_zeros), drop_zeros)


def _median(sq: Tensor, drop_zeros: bool) -> Tensor:
    """``sq.median()``; with ``drop_zeros`` the lower median of the positive entries (0 if there are none).

    Dropping zeros does not select them out (``sq[sq > 0]`` has a data-dependent size: a device-to-host sync at
    every step on a GPU): the entries are sorted, so the Z zeros come first (``sq`` is never negative), and the
    lower median of the K positive ones is the sorted entry at Z + (K - 1) // 2, gathered with an index that
    stays on the device. The value is ``torch.median``'s bit for bit; so is the gradient: ``torch.median`` hands
    it in equal shares to every entry equal to the median, and so does the mean over those entries added below
    (as ``m + (s - s.detach())``, whose value is exactly m).
    """
    if not drop_zeros:
        return sq.median()
    ordered = sq.detach().sort().values  # zeros, positives, NaNs last (a NaN row: the loss is non-finite anyway)
    zeros = (sq == 0).sum()
    positives = (sq > 0).sum()
    index = (zeros + torch.div(positives - 1, 2, rounding_mode="floor")).clamp(0, sq.numel() - 1)
    median = ordered.gather(0, index.unsqueeze(0)).squeeze(0)
    ties = sq.detach() == median
    shared = sq.where(ties, 0.0).sum() / ties.sum()  # the median's value, its gradient shared among the ties
    return torch.where(positives > 0, median + (shared - shared.detach()), 0.0)


def rbf_uniformity(
    z: Tensor,
    sigma: float | Literal["median"] = "median",
    *,
    scale: float = 2.0,
    detach_median: bool = True,
    drop_zero_distances: bool = False,
) -> Tensor:
    """FedUV ``L_U = mean_{i<j} exp(-||z_i - z_j||^2 / (scale * sigma))``, ``scale = 2`` as in the paper.

    ``sigma="median"`` uses the batch's median squared distance, recomputed per call. The defaults follow
    the paper; the official code is ``scale=1, detach_median=False, drop_zero_distances=True`` (see
    ``median_sq_distance``). sigma is floored at 1e-12 so a fully collapsed batch gives a finite value
    (1.0) rather than NaN.
    """
    _require_batch(z, "z")
    sq = _pairwise_sq_distances(z, exact=drop_zero_distances)
    if isinstance(sigma, str):
        if sigma != "median":
            raise ValueError(f"sigma must be a positive float or 'median', got {sigma!r}")
        # the distances above, not computed twice; detached or kept in the graph (the official code)
        bandwidth = _median(sq.detach() if detach_median else sq, drop_zero_distances).clamp_min(_MIN_SIGMA)
        return torch.exp(-sq / (scale * bandwidth)).mean()
    if sigma <= 0:
        raise ValueError(f"sigma must be positive, got {sigma}")
    return torch.exp(-sq / _fixed_divisor(float(sigma), float(scale), sq.dtype, sq.device)).mean()


@functools.lru_cache(maxsize=16)  # one fixed sigma per run: built once, not at every step (a host-to-device copy)
def _fixed_divisor(sigma: float, scale: float, dtype: torch.dtype, device: torch.device) -> Tensor:
    """``scale * sigma`` as a 0-d tensor of the distances' dtype, rounded as the median bandwidth's divisor is.

    Not a Python float: ``scale * sigma`` in float64 then rounded to float32 differs from the float32 product
    (the value the loss has always used) in the last bit for a scale that is not a power of two.
    """
    return scale * torch.tensor(sigma, dtype=dtype, device=device).clamp_min(_MIN_SIGMA)


def hyperspherical_energy(z: Tensor, eps: float = 1e-2, include_diagonal: bool = False) -> Tensor:
    """UniVarFL ``L_HE = (1/n^2) sum_{i,j} 1 / (1 - z_i.z_j + eps)`` on L2-normalised z.

    The paper's sum includes i=j, which only adds the constant n/eps (no useful gradient);
    it is excluded by default (docs/explanation/methods.md#hyperspherical-energy), ``include_diagonal=True``
    restores it.
    The normaliser stays 1/n^2 either way.
    """
    _require_batch(z, "z")
    if eps <= 0:
        raise ValueError(f"eps must be positive, got {eps}")
    n = z.shape[0]
    zn = F.normalize(z, dim=1)
    energy = 1.0 / (1.0 - zn @ zn.T + eps)
    if not include_diagonal:
        energy = energy.masked_fill(_diagonal(n, z.device), 0.0)
    return energy.sum() / n**2


@functools.lru_cache(maxsize=16)
def _diagonal(n: int, device: torch.device) -> Tensor:
    return torch.eye(n, dtype=torch.bool, device=device)


def proximal(params: Iterable[Tensor], anchors: Iterable[Tensor]) -> Tensor:
    """FedProx ``0.5 * sum ||w - w_t||^2`` (without mu); anchors are treated as constants."""
    params, anchors = list(params), list(anchors)
    if len(params) != len(anchors):
        raise ValueError(f"got {len(params)} params but {len(anchors)} anchors")
    if not params:
        raise ValueError("proximal needs at least one parameter")
    # reduce, not sum: no int 0 to start from (the same additions in the same order)
    total = functools.reduce(operator.add, [(w - a.detach()).pow(2).sum() for w, a in zip(params, anchors)])
    return 0.5 * total


def margin_control(logits: Tensor, form: MarginForm = "paper") -> Tensor:
    """FedLD's margin term (Zeng et al., MICCAI 2024), without its weight lambda.

    paper: ``mean_i log(1 + ||f(x_i)||_2^2)`` on each sample's logits; official code:
    ``log(1 + ||softmax(f(X))||_F^2)``, one Frobenius norm of the whole batch's probabilities.
    """
    if logits.dim() != 2:
        raise ValueError(f"logits must be 2-D (n x classes), got shape {tuple(logits.shape)}")
    if form == "paper":
        return torch.log1p(logits.pow(2).sum(dim=1)).mean()
    if form == "official":
        return torch.log1p(F.softmax(logits, dim=1).pow(2).sum())
    raise ValueError(f"form must be 'paper' or 'official', got {form!r}")


def decorrelation(z: Tensor, form: DecorrForm = "official", eps: float = 1e-8) -> Tensor:
    """FedDecorr's decorrelation loss (Shi et al., ICLR 2023) on the representation z (n x d), without beta.

    Each column of z is standardised over the batch, ``zhat = (z - mean) / sqrt(eps + var)``; then

    - ``official`` (the authors' code, the default): unbiased var, and
      ``mean_{i != j} (zhat^T zhat)_ij^2 / n``: the off-diagonal entries only, averaged over the d(d-1) of them,
      divided by the batch size. This is ``((n-1)^2 / n) * mean_{i != j} rho_ij^2`` (rho: Pearson correlation),
      so it grows about linearly with n; the published beta values (0.05 to 0.1 at batch 64) are on this scale.
    - ``paper``: population (biased) var, ``K = zhat^T zhat / n`` (the correlation matrix: unit diagonal, trace d)
      and ``||K||_F^2 / d^2 = (d + sum_{i != j} rho_ij^2) / d^2`` (1/d when decorrelated, 1 when collapsed).
      Its gradient is smaller than the official one by about ``n d / (d - 1)``, so beta must be about n times larger.

    eps (1e-8 in the official code) keeps a constant column finite: it standardises to zeros, so it correlates
    with nothing (official: contributes 0; paper: its diagonal entry is 0 instead of 1), and its gradient is
    amplified by at most 1/sqrt(eps). A batch of one sample has no correlations: the loss is 0 (as in the
    official code). With d = 1 the official form has no off-diagonal entries and is 0.
    """
    if z.dim() != 2:
        raise ValueError(f"z must be 2-D (n x features), got shape {tuple(z.shape)}")
    if eps <= 0:
        raise ValueError(f"eps must be positive, got {eps}")
    if form not in ("official", "paper"):
        raise ValueError(f"form must be 'official' or 'paper', got {form!r}")
    n, d = z.shape
    if n == 0:
        raise ValueError("z is an empty batch")
    if n == 1 or (form == "official" and d == 1):
        return z.new_zeros(())
    centred = z - z.mean(dim=0, keepdim=True)
    zhat = centred / torch.sqrt(eps + centred.var(dim=0, unbiased=form == "official", keepdim=True))
    gram = zhat.T @ zhat
    if form == "paper":
        return (gram / n).pow(2).sum() / d**2
    off_diagonal = gram.pow(2).masked_fill(_diagonal(d, z.device), 0.0).sum() / (d * (d - 1))
    return off_diagonal / n
