"""Per-round diagnostics beyond accuracy (docs/explanation/methods.md#diagnostics).

Pure numpy on arrays the round driver already has; the driver decides when to pay for them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from raytune_fl.metrics import (
    CLIENT_ACC_BOTTOM10,
    CLIENT_ACC_MEAN,
    CLIENT_ACC_STD,
    CLIENT_ACC_VAR,
    CLIENT_ACC_WORST,
    LOSS_AGGREGATION,
    LOSS_LOCAL,
    LOSS_SHIFT,
    SV_EFFECTIVE_RANK,
    SV_MAX,
    SV_MIN,
    SV_MIN_OVER_MAX,
)
from raytune_fl.types import Weights

CLASSIFIER_WEIGHT = "classifier.weight"  # every registered model names its last linear layer `classifier`


def classifier_spectrum(weights: Weights, key: str = CLASSIFIER_WEIGHT) -> np.ndarray:
    """Singular values of the classifier weight (D x d), descending. FedUV's Fig. 1: they collapse under non-IID."""
    if key not in weights:
        raise KeyError(f"no {key!r} in the model's weights; the spectrum diagnostic needs a `classifier` layer")
    return np.linalg.svd(np.asarray(weights[key], dtype=np.float64), compute_uv=False)


def spectrum_summary(singular_values: np.ndarray) -> dict[str, float]:
    s = np.asarray(singular_values, dtype=np.float64)
    total = s.sum()
    if total <= 0:
        return {SV_MAX: 0.0, SV_MIN: 0.0, SV_MIN_OVER_MAX: 0.0, SV_EFFECTIVE_RANK: 0.0}
    p = s[s > 0] / total
    return {
        SV_MAX: float(s[0]),
        SV_MIN: float(s[-1]),
        SV_MIN_OVER_MAX: float(s[-1] / s[0]),
        # exp(entropy of the normalised spectrum) (Roy & Vetterli 2007): D when flat, 1 when rank one
        SV_EFFECTIVE_RANK: float(np.exp(-(p * np.log(p)).sum())),
    }


def client_accuracies(correct: np.ndarray, owner: np.ndarray, num_clients: int) -> np.ndarray:
    """Each client's accuracy on its own held-out samples; NaN for a client without any."""
    counts = np.bincount(owner, minlength=num_clients)
    hits = np.bincount(owner, weights=correct.astype(np.float64), minlength=num_clients)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, hits / np.maximum(counts, 1), np.nan)


def per_client_accuracy(correct: np.ndarray, owner: np.ndarray, num_clients: int) -> dict[str, float]:
    """Accuracy of the global model on each client's held-out samples: unweighted mean, worst, the worst tenth's
    mean (bottom10), spread (standard deviation and variance).

    `correct[i]` says whether sample i was classified right, `owner[i]` is the client it belongs to.
    Clients without held-out samples are left out.
    """
    acc = client_accuracies(correct, owner, num_clients)
    acc = acc[~np.isnan(acc)]
    if not len(acc):
        return {}
    return {
        CLIENT_ACC_MEAN: float(acc.mean()),
        CLIENT_ACC_WORST: float(acc.min()),
        CLIENT_ACC_STD: float(acc.std()),
        CLIENT_ACC_VAR: float(acc.var()),
        CLIENT_ACC_BOTTOM10: bottom_decile_mean(acc),
    }


def bottom_decile_mean(acc: np.ndarray) -> float:
    """q-FFL's "worst 10 %" (Li et al., ICLR 2020): the mean of the ceil(K/10) lowest of K client accuracies. Not
    np.percentile(acc, 10), which interpolates (with 10 clients: 0.1 x the worst + 0.9 x the second worst)."""
    worst = math.ceil(len(acc) / 10)
    return float(np.sort(np.asarray(acc, dtype=np.float64))[:worst].mean())


def loss_decomposition(
    global_loss: float,
    local_losses: Sequence[float],
    shifted_losses: Sequence[float],
    num_samples: Sequence[int],
) -> dict[str, float]:
    """FedLD's Eq. 2: global loss = local loss + distribution-shift loss + aggregation loss.

    With client models w_k, their sample weights p_k, each client's data D_k and the global
    (validation) data D: local = sum p_k L(w_k; D_k); shift = sum p_k [L(w_k; D) - L(w_k; D_k)];
    aggregation = L(w_global; D) - sum p_k L(w_k; D). The three add up to L(w_global; D) exactly.
    """
    p = np.asarray(num_samples, dtype=np.float64)
    p = p / p.sum()
    local = float(p @ np.asarray(local_losses, dtype=np.float64))
    on_global = float(p @ np.asarray(shifted_losses, dtype=np.float64))
    return {
        LOSS_LOCAL: local,
        LOSS_SHIFT: on_global - local,
        LOSS_AGGREGATION: float(global_loss) - on_global,
    }
