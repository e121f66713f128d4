"""FedAlign's Lipschitz-type regulariser: the transmitting matrix of a block and its top singular value.

For a block with input feature map A (n, C_in, H, W) and output B (n, C_out, h, w), A is first average-pooled to
B's spatial size when it is larger (adaptive average pooling to (h, w)). With X = A as (n, C_in, hw) and
Y = B as (n, C_out, hw), the transmitting matrix of sample i is

    G_i = X_i Y_i^T / hw                                          (C_in x C_out)

Its largest singular value sigma_i = sqrt(lambda_max(G_i G_i^T)) is a proxy for the block's Lipschitz constant
(how much it can stretch its input into its output). It is estimated by power iteration on K_i = G_i G_i^T:

    v_0 = 1 (the all-ones vector of length C_in),   m_t = K_i v_{t-1},   s_t = ||m_t||_2 + eps,   v_t = m_t / s_t

for t = 1..T, and sigma_i = sqrt(s_T + eps). Since K_i is symmetric positive semi-definite, s_T -> lambda_max
geometrically with ratio lambda_2 / lambda_1 (unless v_0 happens to be orthogonal to the top eigenvector; the
all-ones start is what FedAlign uses). Gradients flow through every iteration (no detach, no torch.linalg.svd:
its gradient is undefined at repeated singular values).

The regulariser between the reduced-width block (sigma^r) and the full-width block (sigma^f) is the batch mean

    gap = (1/n) sum_i (sigma^r_i - sigma^f_i)^2

Which side carries gradients (FedAlign detaches the full-width features) is the caller's choice.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def transmitting_matrix(a: Tensor, b: Tensor) -> Tensor:
    """G = X Y^T / hw per sample: a (n, C_in, H, W) block input, b (n, C_out, h, w) block output -> (n, C_in, C_out)."""
    if a.dim() != 4 or b.dim() != 4 or a.shape[0] != b.shape[0]:
        raise ValueError(f"expected a (n, C_in, H, W) and b (n, C_out, h, w); got {tuple(a.shape)}, {tuple(b.shape)}")
    (height, width), (h, w) = a.shape[-2:], b.shape[-2:]
    if (height, width) != (h, w):
        if height < h or width < w:  # pooling would have to upsample: not a block that shrinks or keeps its map
            raise ValueError(f"block input {height}x{width} is smaller than its output {h}x{w}")
        a = F.adaptive_avg_pool2d(a, (h, w))
    x = a.flatten(2)  # (n, C_in, hw)
    y = b.flatten(2)  # (n, C_out, hw)
    return torch.bmm(x, y.transpose(1, 2)) / (h * w)


def top_singular_value(g: Tensor, iterations: int = 10, eps: float = 1e-12) -> Tensor:
    """Largest singular value of each g[i] (g: (n, r, c)) by `iterations` power steps on g g^T; shape (n,).

    eps keeps an all-zero g (a dead-ReLU feature map) finite in value and gradient: the division becomes 0 / eps
    instead of 0 / 0, and sqrt is evaluated at 2 * eps > 0 instead of at 0, where its derivative is infinite.
    """
    if g.dim() != 3:
        raise ValueError(f"expected g of shape (n, r, c); got {tuple(g.shape)}")
    if iterations < 1:
        raise ValueError(f"iterations must be >= 1; got {iterations}")
    k = torch.bmm(g, g.transpose(1, 2))  # (n, r, r), symmetric PSD
    v = torch.ones(g.shape[0], g.shape[1], 1, dtype=g.dtype, device=g.device)
    norm = v  # rebound in the first iteration
    for _ in range(iterations):
        m = torch.bmm(k, v)
        # vector_norm's gradient at m = 0 is 0 (not NaN), so an all-zero K stays differentiable
        norm = torch.linalg.vector_norm(m, dim=1, keepdim=True) + eps  # (n, 1, 1)
        v = m / norm
    return torch.sqrt(norm + eps).reshape(g.shape[0])


def lipschitz_gap(sigma_reduced: Tensor, sigma_full: Tensor) -> Tensor:
    """Batch mean of (sigma_reduced - sigma_full)^2; a scalar."""
    if sigma_reduced.shape != sigma_full.shape:
        raise ValueError(f"shapes differ: {tuple(sigma_reduced.shape)} vs {tuple(sigma_full.shape)}")
    return (sigma_reduced - sigma_full).pow(2).mean()
