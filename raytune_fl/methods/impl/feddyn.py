"""FedDyn's code: the dynamic term, lambda_k, and the server's D (raytune_fl.methods.feddyn explains the method)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from raytune_fl.aggregators.feddyn import feddyn, track_latest
from raytune_fl.methods.base import Batch, ClientContext, LocalTerm, ServerAggregator
from raytune_fl.methods.losses import proximal
from raytune_fl.types import ClientUpdate, Weights

NAME = "feddyn"


class DynamicTerm(LocalTerm):
    """<w, lambda_k> + (1/2)||w - w_t||^2 on the trainable parameters; the loop multiplies it by alpha."""

    name = NAME
    per_client = ("anchors", "linear")

    def __init__(self, weight: float, mean_client_size: float | None = None) -> None:
        super().__init__(weight)
        self.alpha = self.weight
        self.mean_client_size = mean_client_size  # set: alpha_k = alpha * mean_n / n_k (the official option)

    def on_round_start(self, ctx: ClientContext) -> None:
        if self.mean_client_size is not None:  # the loop reads `weight` at every step: this client's alpha_k
            self.weight = self.alpha * self.mean_client_size / ctx.x.shape[0]
        self.names = [name for name, p in ctx.model.named_parameters() if p.requires_grad]
        params = dict(ctx.model.named_parameters())
        self.anchors = [params[name].detach().clone() for name in self.names]  # w_t, fixed for the round
        stored = ctx.state.get(self.name)
        if stored is not None and set(stored) != set(self.names):
            raise ValueError(
                f"feddyn: the stored lambda_k has entries {sorted(set(stored) ^ set(self.names))} that differ "
                "from this model's trainable parameters"
            )
        # None: zeros (a first round), made on the host at round end; nothing allocated on the device for them
        host = [] if stored is None else [np.asarray(stored[name]) for name in self.names]
        self.lambdas = dict(zip(self.names, host)) if host else dict.fromkeys(self.names)
        # lambda_k = 0 (a first round): FedProx's term exactly, without a linear part that only adds zeros. Tested
        # on the host arrays (no device sync per parameter); otherwise copied to the device in one transfer.
        self.linear = []
        if host and any(np.any(lam) for lam in host):
            self.linear = _to_device(host, self.anchors)

    def loss(self, batch: Batch) -> Tensor:
        params = dict(batch.model.named_parameters())
        current = [params[name] for name in self.names]
        value = proximal(current, self.anchors)
        if self.linear:
            value = value + sum((w * lam).sum() for w, lam in zip(current, self.linear))
        return value

    def on_round_end(self, ctx: ClientContext) -> None:
        params = dict(ctx.model.named_parameters())
        # Delta_k, as the worker computes it (w - w_t, one rounding), on the device and read back in one copy
        deltas = _to_host([params[name].detach() - anchor for name, anchor in zip(self.names, self.anchors)])
        new = {}
        for name, delta in zip(self.names, deltas):
            lam = self.lambdas[name]
            new[name] = np.asarray((np.zeros_like(delta) if lam is None else lam) + delta, delta.dtype)
        ctx.new_state[self.name] = new
        self.anchors, self.linear = [], []


def _to_device(arrays: Sequence[np.ndarray], like: Sequence[Tensor]) -> list[Tensor]:
    """The arrays as tensors of `like`'s devices and dtypes: one host-to-device copy when they share both."""
    if len({(t.device, t.dtype) for t in like}) != 1:
        return [torch.as_tensor(a, dtype=t.dtype, device=t.device) for a, t in zip(arrays, like)]
    flat = np.concatenate([np.ravel(a) for a in arrays])
    joined = torch.as_tensor(flat, dtype=like[0].dtype, device=like[0].device)
    return [part.view(t.shape) for part, t in zip(joined.split([t.numel() for t in like]), like)]


def _to_host(tensors: Sequence[Tensor]) -> list[np.ndarray]:
    """Freshly computed tensors (nothing else holds them) as numpy arrays: one device-to-host copy when they share
    a dtype (every parameter of a float32 model)."""
    if len({t.dtype for t in tensors}) != 1:
        return [t.cpu().numpy() for t in tensors]
    joined = torch.cat([t.reshape(-1) for t in tensors]).cpu()
    return [part.numpy().reshape(t.shape) for part, t in zip(joined.split([t.numel() for t in tensors]), tensors)]


class DynamicServer(ServerAggregator):
    """Holds D, the sum of every client's lambda_k (empty: zeros), and applies FedDyn's server step."""

    def __init__(self, num_clients: int, server_correction: bool = True, avg_model: bool = False) -> None:
        self.num_clients = num_clients
        self.server_correction = server_correction
        self.avg_model = avg_model
        self.drift: Weights = {}
        # avg_model: the model before round 1, every participant's latest model, and the float64 sum over all M
        self.initial: Weights = {}
        self.latest: dict[int, Weights] = {}
        self.total: Weights = {}

    def aggregate(self, global_weights: Weights, updates: Sequence[ClientUpdate]) -> Weights:
        if self.avg_model:
            if not self.initial:  # the first aggregation: the global weights are still the initial model
                floats = updates[0].delta
                self.initial = {k: np.array(global_weights[k], copy=True) for k in floats}
                self.total = {k: self.num_clients * np.asarray(v, np.float64) for k, v in self.initial.items()}
            self.total, self.latest = track_latest(self.total, self.latest, self.initial, global_weights, updates)
        new, self.drift = feddyn(
            global_weights, updates, self.drift, self.num_clients, server_correction=self.server_correction
        )
        return new

    def metrics(self) -> dict[str, float]:
        trainable = list(self.drift.values())  # D is kept for trainable entries only
        if not trainable:
            return {}
        return {"drift_norm": float(np.sqrt(sum(np.sum(d * d) for d in trainable))) / self.num_clients}

    def extra_models(self) -> dict[str, Weights]:
        if not self.total:
            return {}
        return {"avg": {k: np.asarray(v / self.num_clients, self.initial[k].dtype) for k, v in self.total.items()}}

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"D": {key: value.copy() for key, value in self.drift.items()}}
        if self.total:
            state.update(initial=self.initial, latest=self.latest, total=self.total)
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.drift = {key: np.array(value, copy=True) for key, value in state.get("D", {}).items()}
        self.initial = {k: np.array(v, copy=True) for k, v in state.get("initial", {}).items()}
        self.latest = {
            int(c): {k: np.array(v, copy=True) for k, v in m.items()} for c, m in state.get("latest", {}).items()
        }
        self.total = {k: np.array(v, np.float64, copy=True) for k, v in state.get("total", {}).items()}
