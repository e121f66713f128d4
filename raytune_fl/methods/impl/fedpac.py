"""FedPAC's code: the client's own classifier and statistics, the centroid term, the mixing server
(raytune_fl.methods.fedpac explains the method)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from raytune_fl.aggregators import fedavg
from raytune_fl.aggregators.fedpac import client_statistics, global_centroids, mix_classifiers, mix_weights
from raytune_fl.methods.base import Batch, ClientContext, ClientHook, LocalTerm, ServerAggregator
from raytune_fl.methods.impl.freeze import CLASSIFIER_PREFIX
from raytune_fl.types import ClientUpdate, Weights

NAME = "fedpac"
STATISTICS_BATCH = 256  # round-start and round-end passes over the client's data, in chunks of this many


@dataclass(frozen=True)
class Centroids:
    """What the server broadcasts: last round's global class centroids."""

    centroids: np.ndarray  # (C, d)
    present: np.ndarray  # (C,) bool: whether any participant held the class


@dataclass(frozen=True)
class PrototypeReport:
    """What a client sends besides its delta: its statistics on the received body, class means after training."""

    v: float  # V_i
    h: np.ndarray  # (C, d): p_k * mu_k on the received body
    class_means: np.ndarray  # (C, d) on the trained body; zero rows for absent classes
    class_counts: np.ndarray  # (C,)


def representations(model: nn.Module, x: Tensor) -> Tensor:
    """z for every sample, in eval mode without gradients (BatchNorm uses, and does not update, its statistics)."""
    training = model.training
    model.eval()
    with torch.no_grad():
        z = torch.cat([model(x[i : i + STATISTICS_BATCH])[1] for i in range(0, x.shape[0], STATISTICS_BATCH)])
    model.train(training)
    return z


def _as_numpy(tensor: Tensor) -> np.ndarray:
    return tensor.detach().to("cpu", torch.float64).numpy()


class PersonalClassifier(ClientHook):
    """Loads the client's own classifier, computes FedPAC's statistics and the alignment targets, reports."""

    name = NAME
    per_client = ("targets",)  # read by CentroidAlignment at every step
    per_sample = False  # reports class means and feature statistics of the client's data, with no noise

    def __init__(self, num_classes: int) -> None:
        self.num_classes = num_classes
        self.targets: Tensor | None = None  # (C, d) alignment target per class; None: no term this round

    def on_round_start(self, ctx: ClientContext) -> None:
        own: Mapping[str, Any] | None = ctx.state.get(self.name)
        if own is not None:
            entries = ctx.model.state_dict()  # shares storage with the model: copy_ writes into it
            with torch.no_grad():
                for key, value in own["classifier"].items():
                    entries[key].copy_(torch.from_numpy(np.array(value)))
        z = representations(ctx.model, ctx.x)
        self.before = client_statistics(_as_numpy(z), ctx.y.cpu().numpy(), self.num_classes)
        broadcast: Centroids | None = ctx.payload.get(self.name)
        if broadcast is None:  # round 1: no global centroids yet
            self.targets = None
            return
        targets = np.where(broadcast.present[:, None], broadcast.centroids, self.before.class_means)
        self.targets = torch.as_tensor(targets, dtype=z.dtype, device=z.device)

    def on_round_end(self, ctx: ClientContext) -> None:
        after = client_statistics(_as_numpy(representations(ctx.model, ctx.x)), ctx.y.cpu().numpy(), self.num_classes)
        ctx.extras[self.name] = PrototypeReport(self.before.v, self.before.h, after.class_means, after.class_counts)
        self.targets = None


class CentroidAlignment(LocalTerm):
    """R: the distance of z to its class's target (PersonalClassifier.targets); 0 while there is none."""

    name = "align"  # logged unweighted as term_align

    def __init__(self, weight: float, form: str, source: PersonalClassifier) -> None:
        super().__init__(weight)
        self.form, self.source = form, source

    def loss(self, batch: Batch) -> Tensor:
        if self.source.targets is None:
            return batch.z.new_zeros(())
        squared = (batch.z - self.source.targets[batch.y]) ** 2
        return squared.mean() if self.form == "official" else squared.sum(dim=1).mean()


class ClassifierMixServer(ServerAggregator):
    """FedAvg of the global weights, the global centroids (broadcast), and each participant's mixed classifier."""

    def __init__(self, mix: bool) -> None:
        self.mix = mix
        self.centroids: np.ndarray | None = None
        self.present: np.ndarray | None = None
        self.mixing: np.ndarray | None = None  # the last round's a_ij (rows: participants in client-id order)
        self._v_mean = 0.0
        self._pending: dict[int, dict[str, Any]] = {}

    def aggregate(self, global_weights: Weights, updates: Sequence[ClientUpdate]) -> Weights:
        reports: list[PrototypeReport] = [u.extras[NAME] for u in updates]
        self.centroids, self.present = global_centroids(
            [r.class_means for r in reports], [r.class_counts for r in reports]
        )
        if self.mix:
            keys = [k for k in updates[0].delta if k.startswith(CLASSIFIER_PREFIX)]
            trained = [{k: global_weights[k] + u.delta[k] for k in keys} for u in updates]
            v = np.array([r.v for r in reports])
            self.mixing, self._v_mean = mix_weights(v, np.stack([r.h for r in reports])), float(v.mean())
            mixed = mix_classifiers(self.mixing, trained)
            self._pending = {u.client_id: {NAME: {"classifier": m}} for u, m in zip(updates, mixed)}
        return fedavg(global_weights, updates)

    def metrics(self) -> dict[str, float]:
        """How much participants borrow: the mean weight a client keeps on its own classifier (1: none borrowed),
        and the mean V_i (FedPAC's estimate of the classifier-side variance)."""
        if self.mixing is None:
            return {}
        return {"mix_self_weight": float(np.mean(np.diag(self.mixing))), "mix_v_mean": self._v_mean}

    def client_states(self) -> dict[int, dict[str, Any]]:
        pending, self._pending = self._pending, {}
        return pending

    def payload(self) -> dict[str, Any]:
        if self.centroids is None or self.present is None:  # both set at once, by a round or a checkpoint
            return {}
        return {NAME: Centroids(self.centroids, self.present)}

    def state_dict(self) -> dict[str, Any]:
        if self.centroids is None or self.present is None:
            return {}
        return {"centroids": self.centroids.copy(), "present": self.present.copy()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if "centroids" in state:
            self.centroids = np.array(state["centroids"], copy=True)
            self.present = np.array(state["present"], dtype=bool, copy=True)


def with_own_classifier(global_weights: Weights, state: Mapping[str, Any]) -> Weights:
    """A client's model: the global body with its own mixed classifier (none yet: the global one)."""
    own = state.get(NAME)
    return {**global_weights, **own["classifier"]} if own else global_weights
