"""FedPAC: feature alignment and classifier collaboration (Xu, Tong, Huang, ICLR 2023). Pure maths, numpy only.

The model is a feature extractor f (z = f(x), d-dimensional) and a linear classifier g over C classes. This module
holds the arithmetic; the client hook and the server aggregator that call it live elsewhere.

Client statistics. Client i's features z (n x d) and labels y, n_k the count of class k, p_k = n_k / n, mu_k the
class mean of z (zero for an absent class):

    h[k] = p_k mu_k                                                        (C x d)
    V    = (1/n) sum_k ( p_k E_k[||z||^2] - p_k^2 ||mu_k||^2 )             (absent classes contribute 0)

Global centroids (the feature-alignment targets), count-weighted over the participants i:

    c_k = sum_i n_{i,k} c_{i,k} / sum_i n_{i,k},   present[k] = (sum_i n_{i,k} > 0)  (else c_k = 0)

Classifier collaboration. For reference client i and participants j, l (m of them, in the order given):

    P = diag(V) + D,   D[j, l] = sum_k <h_i[k] - h_j[k], h_i[k] - h_l[k]>
    a_i = argmin_a a^T P a  s.t.  a >= 0, sum(a) = 1

then weights below WEIGHT_THRESHOLD = 1e-3 are set to 0 and the row renormalised to sum 1. D is the Gram matrix of
the vectors h_i - h_j (flattened over classes and dimensions), so P is PSD whenever every V_j >= 0; row i, column i
of D are zero. Client i's new classifier is sum_j A[i, j] g_j.

Numerical guard (the official code's): if P's smallest eigenvalue (np.linalg.eigh) is negative (strictly, no
tolerance), P is rebuilt as sum lambda u u^T over the eigenpairs with lambda >= EIGEN_FLOOR = 0.01, which also drops
small positive eigenvalues; if no eigenpair survives, or the rebuilt P still has an eigenvalue below
-PSD_TOL * max(1, max |lambda|) (PSD_TOL = 1e-10: the rebuilt P is PSD up to rounding), row i is the unit vector
e_i, i.e. the client keeps its own classifier.

Choices where the paper and the code leave room: the code zeroes weights <= 1e-3 and does not renormalise; here
weights < 1e-3 are zeroed and the row renormalised (if every weight were below 1e-3, possible only with m > 1000,
the row is kept unthresholded). The code calls a generic QP solver (cvxpy); here `simplex_qp` is an exact
active-set method (Wolfe's minimum-norm-point algorithm), deterministic, without scipy.

`simplex_qp` works on P alone. With P = G^T G (G's columns are points p_j), a^T P a = ||G a||^2: the problem is the
point of minimum norm in the convex hull of the p_j. Wolfe's algorithm keeps a "corral" S of affinely independent
points and the current point x = G w (w >= 0 on S, sum 1):

- major cycle: with g = P w (g_j = <x, p_j>), stop when ||x||^2 - min_j g_j <= 1e-12 * max_j P_jj (then
  <x, p_j> >= ||x||^2 for every j: the optimality condition); otherwise add j = argmin g to S;
- minor cycle: v = the minimiser of v^T P_S v over sum(v) = 1 (one KKT solve, non-singular because S is affinely
  independent, even when P is singular); if v > 0, w = v; else move w towards v until a weight hits zero, drop
  it from S, and repeat.

Each major cycle strictly lowers ||x||, so no corral repeats: the method ends after finitely many steps, at the exact
solution up to rounding (the stop rule bounds the objective's excess by 2e-12 max_j P_jj). Ties (several optimal a,
as with identical rows of P) are broken deterministically by the lowest index.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

WEIGHT_THRESHOLD = 1e-3  # mixing weights below this are zeroed (the official code's eps)
EIGEN_FLOOR = 0.01  # the guard keeps eigenpairs with eigenvalue >= this (the official code's)
PSD_TOL = 1e-10  # relative: the rebuilt P counts as PSD when its smallest eigenvalue >= -PSD_TOL * max(1, |lambda|)

_STOP_TOL = 1e-12  # Wolfe's Z1, relative to max_j P_jj: the optimality gap that ends the major cycle
_WEIGHT_TOL = 1e-12  # Wolfe's Z2/Z3 on the barycentric weights (which lie in [0, 1]): at or below this is zero


@dataclass(frozen=True)
class ClientStatistics:
    """One client's feature statistics: h (C x d), V, class means (C x d, zero rows for absent classes), counts."""

    h: np.ndarray
    v: float
    class_means: np.ndarray
    class_counts: np.ndarray


def client_statistics(z: np.ndarray, y: np.ndarray, num_classes: int) -> ClientStatistics:
    """h[k] = p_k mu_k and V = (1/n) sum_k (p_k E_k||z||^2 - p_k^2 ||mu_k||^2) from features z (n x d), labels y."""
    z = np.asarray(z, dtype=np.float64)
    y = np.asarray(y)
    if z.ndim != 2:
        raise ValueError(f"features must be (n, d), got shape {z.shape}")
    if y.ndim != 1 or len(y) != len(z):
        raise ValueError(f"labels must be ({len(z)},), got shape {y.shape}")
    if len(z) == 0:
        raise ValueError("cannot compute statistics of zero samples")
    if not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"labels must be integers, got {y.dtype}")
    if y.min() < 0 or y.max() >= num_classes:
        raise ValueError(f"labels must lie in [0, {num_classes}), got [{y.min()}, {y.max()}]")
    n = len(z)
    onehot = (y[:, None] == np.arange(num_classes)[None, :]).astype(np.float64)  # n x C
    counts = onehot.sum(axis=0).astype(np.int64)
    sums = onehot.T @ z  # C x d per-class sums of z
    sq_sums = onehot.T @ np.einsum("nd,nd->n", z, z)  # C per-class sums of ||z||^2
    present = counts > 0
    means = np.zeros_like(sums)
    means[present] = sums[present] / counts[present, None]
    p = counts / n
    h = p[:, None] * means
    second = np.zeros(num_classes)
    second[present] = sq_sums[present] / counts[present]  # E_k ||z||^2
    v = float(np.sum(p * second - p**2 * np.einsum("kd,kd->k", means, means)) / n)
    return ClientStatistics(h=h, v=v, class_means=means, class_counts=counts)


def global_centroids(
    class_means: Sequence[np.ndarray], class_counts: Sequence[np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """(c, present): c_k = sum_i n_{i,k} c_{i,k} / sum_i n_{i,k} (C x d); rows of absent classes are zero."""
    if len(class_means) == 0 or len(class_means) != len(class_counts):
        raise ValueError(f"need one count vector per class-mean matrix, got {len(class_means)}, {len(class_counts)}")
    means = np.stack([np.asarray(c, dtype=np.float64) for c in class_means])  # m x C x d
    counts = np.stack([np.asarray(n, dtype=np.float64) for n in class_counts])  # m x C
    if means.ndim != 3 or counts.shape != means.shape[:2]:
        raise ValueError(f"class means {means.shape} and counts {counts.shape} do not match")
    if np.any(counts < 0):
        raise ValueError("class counts must be non-negative")
    total = counts.sum(axis=0)
    present = total > 0
    centroids = np.zeros(means.shape[1:])
    # an absent class's mean row may hold anything (NaN included): only classes with count > 0 enter the sum
    weighted = (counts[:, :, None] * np.where(counts[:, :, None] > 0, means, 0.0)).sum(axis=0)
    centroids[present] = weighted[present] / total[present, None]
    return centroids, present


def _affine_minimizer(p_s: np.ndarray) -> np.ndarray:
    """argmin v^T P_S v over sum(v) = 1 via its KKT system [[P_S, 1], [1^T, 0]] [v; mu] = [0; 1]."""
    k = len(p_s)
    kkt = np.zeros((k + 1, k + 1))
    kkt[:k, :k] = p_s
    kkt[:k, k] = 1.0
    kkt[k, :k] = 1.0
    rhs = np.zeros(k + 1)
    rhs[k] = 1.0
    try:
        return np.linalg.solve(kkt, rhs)[:k]
    except np.linalg.LinAlgError:  # affinely dependent only through rounding: any least-squares solution will do
        return np.linalg.lstsq(kkt, rhs, rcond=None)[0][:k]


def simplex_qp(p: np.ndarray) -> np.ndarray:
    """The exact minimiser of a^T P a over a >= 0, sum(a) = 1, P symmetric PSD (possibly singular); Wolfe's method."""
    p = np.asarray(p, dtype=np.float64)
    if p.ndim != 2 or p.shape[0] != p.shape[1] or p.shape[0] == 0:
        raise ValueError(f"P must be a non-empty square matrix, got shape {p.shape}")
    if not np.all(np.isfinite(p)):
        raise ValueError("P must be finite")
    m = len(p)
    scale = float(np.max(np.abs(np.diag(p))))
    if m == 1 or scale == 0.0:  # one point, or P = 0 (PSD with a zero diagonal): every feasible a is optimal
        a = np.zeros(m)
        a[0] = 1.0
        return a
    p = (p + p.T) / (2.0 * scale)  # symmetric, max diagonal 1: the tolerances below are relative
    w = np.zeros(m)
    corral = [int(np.argmin(np.diag(p)))]  # the shortest point; argmin takes the lowest index on ties
    w[corral[0]] = 1.0
    for _ in range(20 * m + 100):  # finite in exact arithmetic; the cap only stops rounding-driven cycling
        g = p @ w
        j = int(np.argmin(g))
        if w @ g - g[j] <= _STOP_TOL or j in corral:
            break
        corral.append(j)
        while True:  # minor cycle: the affine minimiser of the corral, or the furthest feasible step towards it
            idx = np.array(corral)
            v = _affine_minimizer(p[np.ix_(idx, idx)])
            if np.all(v > _WEIGHT_TOL):
                w[:] = 0.0
                w[idx] = v
                break
            cur = w[idx]
            blocking = (v <= _WEIGHT_TOL) & (cur > v)
            ratios = cur[blocking] / (cur[blocking] - v[blocking])
            theta = min(1.0, float(ratios.min())) if ratios.size else 1.0
            new = cur + theta * (v - cur)
            drop = new <= _WEIGHT_TOL
            if ratios.size:  # the point that blocks the step leaves even if rounding left it a hair above zero
                drop[np.flatnonzero(blocking)[int(np.argmin(ratios))]] = True
            new[drop] = 0.0
            new /= new.sum()
            w[:] = 0.0
            w[idx] = new
            corral = [c for c, d in zip(corral, drop) if not d]
    w = np.clip(w, 0.0, None)
    return w / w.sum()


def _guarded_matrix(p: np.ndarray) -> np.ndarray | None:
    """P itself if PSD; else the official code's rebuild from eigenpairs >= EIGEN_FLOOR; None when that fails."""
    evals, evecs = np.linalg.eigh(p)
    if evals[0] >= 0.0:
        return p
    keep = evals >= EIGEN_FLOOR
    if not np.any(keep):
        return None
    rebuilt = (evecs[:, keep] * evals[keep]) @ evecs[:, keep].T
    rebuilt = (rebuilt + rebuilt.T) / 2.0
    check = np.linalg.eigh(rebuilt)[0]
    if check[0] < -PSD_TOL * max(1.0, float(np.max(np.abs(check)))):
        return None
    return rebuilt


def mix_weights(v: np.ndarray, h: np.ndarray) -> np.ndarray:
    """A (m x m): row i is client i's classifier weights over the participants, from V_j (m,) and h_j (m, C, d)."""
    v = np.asarray(v, dtype=np.float64)
    h = np.asarray(h, dtype=np.float64)
    if v.ndim != 1 or len(v) == 0 or h.ndim != 3 or len(h) != len(v):
        raise ValueError(f"need v (m,) and h (m, C, d) with m >= 1, got {v.shape} and {h.shape}")
    if not (np.all(np.isfinite(v)) and np.all(np.isfinite(h))):
        raise ValueError("V and h must be finite")
    m = len(v)
    flat = h.reshape(m, -1)
    weights = np.zeros((m, m))
    for i in range(m):
        diff = flat[i][None, :] - flat  # row j: h_i - h_j, flattened over classes and dimensions
        p = np.diag(v) + diff @ diff.T
        guarded = _guarded_matrix(p)
        if guarded is None:  # no usable QP: the client keeps its own classifier
            weights[i, i] = 1.0
            continue
        a = simplex_qp(guarded)
        kept = np.where(a >= WEIGHT_THRESHOLD, a, 0.0)
        if kept.sum() > 0.0:
            a = kept
        weights[i] = a / a.sum()
    return weights


def mix_classifiers(
    weights: np.ndarray, classifiers: Sequence[Mapping[str, np.ndarray]]
) -> list[dict[str, np.ndarray]]:
    """Client i's classifier: sum_j weights[i, j] classifiers[j][key] for every key (float64 sum, original dtype).

    Zero weights are skipped, so a unit row returns that classifier bit for bit and nothing leaks from a
    non-finite classifier that has no weight.
    """
    weights = np.asarray(weights, dtype=np.float64)
    if weights.ndim != 2 or weights.shape[1] != len(classifiers) or len(classifiers) == 0:
        raise ValueError(f"weights {weights.shape} do not match {len(classifiers)} classifiers")
    keys = list(classifiers[0])
    for j, classifier in enumerate(classifiers):
        if set(classifier) != set(keys):
            raise ValueError(f"classifier {j} has keys {sorted(classifier)}, expected {sorted(keys)}")
    mixed: list[dict[str, np.ndarray]] = []
    for row in weights:
        out: dict[str, np.ndarray] = {}
        for key in keys:
            reference = np.asarray(classifiers[0][key])
            total = np.zeros(reference.shape)
            for j, (weight, classifier) in enumerate(zip(row, classifiers)):
                value = np.asarray(classifier[key], dtype=np.float64)
                if value.shape != reference.shape:
                    raise ValueError(f"classifier {j}'s {key!r} has shape {value.shape}, expected {reference.shape}")
                if weight != 0.0:
                    total += weight * value
            out[key] = total.astype(reference.dtype)
        mixed.append(out)
    return mixed
