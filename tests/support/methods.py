"""What the per-method tests in tests/methods share: the tiny model and local settings, hand-made client updates,
workers on a few random clients, a round of local training, and bit-exact comparisons of weights."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import torch
from torch import nn

from raytune_fl.engine.local import LocalData, LocalResult, LocalSettings, train_local
from raytune_fl.engine.worker import ClientWorker, ModelSpec, WorkerSpec
from raytune_fl.methods import build_method
from raytune_fl.models import build_model
from raytune_fl.types import ClientUpdate, Weights
from raytune_fl.weights import read_weights

MODEL = ModelSpec("simple_cnn", 1, 10, (8, 8))
SETTINGS = LocalSettings(epochs=1, batch_size=16, lr=0.05, momentum=0.9, weight_decay=0.0)


# ---- hand-made client updates


def f32(values) -> np.ndarray:
    return np.asarray(values, np.float32)


def update(cid: int, n: int, delta: dict, steps: int = 1, buffers: dict | None = None, extras=None) -> ClientUpdate:
    """Client `cid`'s update from `n` samples and `steps` local steps, its delta entries as float32."""
    return ClientUpdate(cid, n, steps, {k: f32(v) for k, v in delta.items()}, buffers or {}, {}, extras=extras or {})


def random_updates(seed: int, count: int = 5, steps: list[int] | None = None) -> list[ClientUpdate]:
    """`count` clients of random sizes with random deltas of GLOBAL's shapes (two steps each unless given)."""
    rng = np.random.default_rng(seed)
    steps = steps or [2] * count
    sizes = rng.integers(1, 60, count)
    return [
        update(cid, int(sizes[cid]), {"w": rng.normal(size=(3, 2)), "b": rng.normal(size=2)}, steps[cid])
        for cid in range(count)
    ]


GLOBAL = {"w": f32(np.arange(6).reshape(3, 2)), "b": f32([0.5, -0.5])}


def assert_bit_equal(a: dict, b: dict) -> None:
    """The same keys, and under each the same dtype and the same values bit for bit."""
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].dtype == b[key].dtype, key
        assert np.array_equal(a[key], b[key]), key


def through_pickle(state):  # what Ray does to the state between rounds
    return pickle.loads(pickle.dumps(state))


# ---- workers on MODEL


def initial_weights() -> Weights:
    """MODEL's weights from seed 0: every worker test's round-1 global model."""
    torch.manual_seed(0)
    return read_weights(MODEL.build())


def three_client_data(sizes=(32, 24, 32)) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """Random 8x8 images and labels, split into clients of `sizes` samples."""
    rng = np.random.default_rng(0)
    n = sum(sizes)
    x = rng.normal(size=(n, 1, 8, 8)).astype(np.float32)
    y = rng.integers(0, 10, n).astype(np.int64)
    return x, y, np.split(np.arange(n), np.cumsum(sizes)[:-1])


def three_client_worker(method: str, params: dict | None = None) -> ClientWorker:
    """A worker on three_client_data(): clients of 32, 24 and 32 samples."""
    return ClientWorker(WorkerSpec(MODEL, method, params or {}, SETTINGS, seed=0), *three_client_data())


def two_client_worker(method: str, params: dict | None = None) -> ClientWorker:
    """A worker on two clients of 32 random samples each: two local steps of 16 a round."""
    clients = 2
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32 * clients, 1, 8, 8)).astype(np.float32)
    y = rng.integers(0, 10, size=32 * clients).astype(np.int64)
    indices = np.array_split(np.arange(32 * clients), clients)
    return ClientWorker(WorkerSpec(MODEL, method, params or {}, SETTINGS, seed=0), x, y, indices)


# ---- one round of local training, without a worker


def _random_batch(n=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 1, 8, 8, generator=g), torch.randint(0, 10, (n,), generator=g)


def train_one_round(method_name: str, params: dict[str, Any], n=40) -> tuple[nn.Module, LocalResult]:
    """train_local on n random samples (40: batches of 16 + 16 + 8) from a seed-0 simple_cnn: (model, result)."""
    torch.manual_seed(0)
    model = build_model("simple_cnn", 1, 10, (8, 8))
    x, y = _random_batch(n)
    method = build_method(method_name, params, 10)
    result = train_local(model, method, LocalData(x, y, 10), SETTINGS, torch.Generator().manual_seed(1))
    return model, result
