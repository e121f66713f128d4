"""A client worker: holds the training data and one model, trains any client on request.

Plain Python, no Ray: the in-process pool calls it directly and each Ray actor wraps one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from raytune_fl.aggregators.fedavg import is_running_statistic
from raytune_fl.aggregators.partial import summed
from raytune_fl.engine.batched import train_local_batched, vectorisable
from raytune_fl.engine.local import LocalData, LocalResult, LocalSettings, train_local
from raytune_fl.methods import build_method
from raytune_fl.methods.base import ClientContext, ClientHook, Method, MethodContext
from raytune_fl.models import build_model
from raytune_fl.types import ClientUpdate, Weights, is_float_entry
from raytune_fl.weights import as_tensor, load_weights, read_weights


@dataclass(frozen=True)
class ModelSpec:
    name: str
    in_channels: int
    num_classes: int
    image_size: tuple[int, int]
    channels_last: bool = False  # NHWC convolutions: weights keep their values and their NCHW numpy form
    text: bool = False  # token ids (n, L): in_channels is the vocabulary's size, image_size (1, L)

    def build(self) -> torch.nn.Module:
        model = build_model(self.name, self.in_channels, self.num_classes, self.image_size, self.text)
        return model.to(memory_format=torch.channels_last) if self.channels_last else model

    def images(self, x: torch.Tensor) -> torch.Tensor:
        """`x` in the layout the model computes in (batches indexed out of it keep that layout)."""
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last and x.dim() == 4 else x


@dataclass(frozen=True)
class WorkerSpec:
    model: ModelSpec
    method: str
    method_params: Mapping[str, Any]
    local: LocalSettings
    seed: int
    device: str = "cpu"
    extra: dict[str, Any] = field(default_factory=dict)
    local_statistics: bool = False  # batchnorm.aggregate: local (each client keeps its running statistics)
    deterministic: bool = False  # reproducibility.deterministic: the actors switch deterministic kernels on
    client_batch: int = 1  # resources.client_batch: clients trained at once in one vectorised step (1: one by one)

    def method_context(self, num_clients: int, mean_client_size: float = 0.0) -> MethodContext:
        local = self.local
        return MethodContext(
            self.model.num_classes, local.lr, local.momentum, num_clients, mean_client_size, local.schedule.kind
        )


@dataclass(frozen=True)
class TrainJob:
    """One client's local round."""

    client_id: int
    round_index: int  # the round the update is for (methods see it)
    weights: Weights  # the global model the client starts from
    payload: Mapping[str, Any]  # what the server broadcasts with the weights (SCAFFOLD's c, ...)
    state: Any = None  # this client's method state from its last round
    max_steps: int | None = None  # a step budget instead of local_epochs (system heterogeneity)
    stream: int | None = None  # random-number stream key when the round is not unique (asynchronous dispatches)


class KeepStatisticsLocal(ClientHook):
    """`batchnorm.aggregate: local`: a client resumes from its own BatchNorm running statistics (kept by the
    round driver as its state) instead of the server's; its first round starts from the server's."""

    name = "bn_local_statistics"

    def on_round_start(self, ctx: ClientContext) -> None:
        own = ctx.state.get(self.name)
        if own:
            with torch.no_grad():
                for key, buffer in ctx.model.named_buffers():
                    if key in own:
                        buffer.copy_(torch.from_numpy(own[key]))

    def on_round_end(self, ctx: ClientContext) -> None:
        ctx.new_state[self.name] = {
            key: buffer.detach().cpu().numpy().copy()
            for key, buffer in ctx.model.named_buffers()
            if is_running_statistic(key)
        }


def client_batches(jobs: Sequence[TrainJob], sizes: Sequence[int], client_batch: int, workers: int) -> list[list[int]]:
    """Which jobs train together (`resources.client_batch`), as positions in `jobs`: a round's jobs, largest client
    first, in consecutive runs of at most `client_batch`, and no longer than it takes to give every worker one.

    A function of the jobs alone, never of timing: the same clients share a step in every run of a seed (a batch's
    results can differ from one client's alone in the last float bits only, see engine/batched.py).
    """
    order = sorted(range(len(jobs)), key=lambda i: (jobs[i].round_index, -sizes[jobs[i].client_id], i))
    runs: list[list[int]] = []
    for round_index in dict.fromkeys(jobs[i].round_index for i in order):
        members = [i for i in order if jobs[i].round_index == round_index]
        width = max(1, min(client_batch, -(-len(members) // max(workers, 1))))
        runs += [members[at : at + width] for at in range(0, len(members), width)]
    return runs


def client_seed(seed: int, round_index: int, client_id: int) -> int:
    """Independent, reproducible stream per (seed, round, client), whichever worker trains it."""
    # a Python int before the shift: NumPy 1.x promotes uint64 >> int to float64 and refuses the shift
    return int(np.random.SeedSequence([seed, round_index, client_id]).generate_state(1, np.uint64)[0]) >> 1


class ClientWorker:
    def __init__(
        self,
        spec: WorkerSpec,
        x_train: np.ndarray,
        y_train: np.ndarray,
        client_indices: Sequence[np.ndarray],
    ) -> None:
        self.spec = spec
        self.device = torch.device(spec.device)
        self.model = spec.model.build().to(self.device)
        sizes = [len(ix) for ix in client_indices]
        self.method_context = spec.method_context(len(sizes), sum(sizes) / max(len(sizes), 1))
        self.method = self._build_method()
        # client batching: one module and one set of hook instances per client slot (the first is the above)
        self.slots: list[tuple[torch.nn.Module, Method]] = [(self.model, self.method)]
        self.sequential_reason = vectorisable(self.method)  # "" when the method's clients can train stacked
        self.x, self.y = as_tensor(x_train), as_tensor(y_train)  # shared with the object store: not converted
        self.client_indices = [torch.as_tensor(np.asarray(ix), dtype=torch.long) for ix in client_indices]
        # On a GPU the training set is uploaded once (in the model's layout) and each round's client share is
        # gathered there: no host-to-device copy per round. On the CPU each round copies its client's share only.
        self.on_device: tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]] | None = None
        if self.device.type != "cpu":
            self.on_device = (
                spec.model.images(self.x.to(self.device)),
                self.y.to(self.device),
                [ix.to(self.device) for ix in self.client_indices],
            )

    def _build_method(self) -> Method:
        method = build_method(self.spec.method, dict(self.spec.method_params), self.method_context)
        if self.spec.local_statistics:
            method = replace(method, hooks=(*method.hooks, KeepStatisticsLocal()))
        return method

    def _client_data(self, client_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        index = self.client_indices[client_id]
        if self.on_device is None:
            x = self.spec.model.images(self.x[index]).to(self.device)  # a copy of this client's share only
            return x, self.y[index].to(self.device)
        x_all, y_all, indices = self.on_device
        return x_all[indices[client_id]], y_all[indices[client_id]]

    def _generator(self, client_id: int, round_index: int, stream: int | None) -> torch.Generator:
        return torch.Generator().manual_seed(
            client_seed(self.spec.seed, round_index if stream is None else stream, client_id)
        )

    def train_many(self, jobs: Sequence[TrainJob]) -> list[ClientUpdate]:
        """Several clients' local rounds, in one vectorised step per local step (`client_batch`) when the method
        allows it and the jobs share a round; otherwise one after another. Updates in the order of `jobs`."""
        rounds = {job.round_index for job in jobs}
        if len(jobs) == 1 or self.sequential_reason or len(rounds) > 1:
            return [self._train_job(job) for job in jobs]
        while len(self.slots) < len(jobs):
            self.slots.append((self.spec.model.build().to(self.device), self._build_method()))
        slots = self.slots[: len(jobs)]
        local = self.spec.local.for_round(jobs[0].round_index)
        parts = [self._client_data(job.client_id) for job in jobs]
        x, y = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
        contexts, at = [], 0
        for (model, _), job, (x_k, _) in zip(slots, jobs, parts):
            load_weights(model, job.weights)
            n = x_k.shape[0]
            contexts.append(
                ClientContext(
                    model,
                    job.client_id,
                    job.round_index,
                    x[at : at + n],
                    y[at : at + n],
                    local.lr,
                    job.state or {},
                    job.payload or {},
                )  # fmt: skip
            )
            at += n
        results = train_local_batched(
            [model for model, _ in slots],
            [method for _, method in slots],
            LocalData(x, y, self.spec.model.num_classes),
            local,
            [self._generator(job.client_id, job.round_index, job.stream) for job in jobs],
            contexts,
            [job.max_steps for job in jobs],
        )
        return [
            self._update(job.client_id, job.weights, model, result)
            for job, (model, _), result in zip(jobs, slots, results)
        ]

    def train_summed(self, jobs: Sequence[TrainJob]) -> list[ClientUpdate]:
        """A round's clients for this worker, their deltas summed into one (resources.partial_sums): trained as
        `train_many` would train them (`client_batch` at a time); updates in the order of `jobs`."""
        sizes = [int(ix.numel()) for ix in self.client_indices]
        updates: dict[int, ClientUpdate] = {}
        for run in client_batches(jobs, sizes, self.spec.client_batch, workers=1):
            updates.update(zip(run, self.train_many([jobs[i] for i in run])))
        return summed([updates[i] for i in range(len(jobs))])

    def _train_job(self, job: TrainJob) -> ClientUpdate:
        return self.train(
            job.client_id, job.round_index, job.weights, job.payload, job.state, job.max_steps, job.stream
        )

    def train(
        self,
        client_id: int,
        round_index: int,
        weights: Weights,
        payload: Mapping[str, Any] | None = None,
        state: Mapping[str, Any] | None = None,
        max_steps: int | None = None,
        stream: int | None = None,
    ) -> ClientUpdate:
        """One client's local round from the global `weights`; `state` is what this client's hooks kept last time.

        `stream` keys the client's random numbers when the round alone does not (asynchronous dispatches).
        """
        load_weights(self.model, weights)
        x, y = self._client_data(client_id)
        generator = self._generator(client_id, round_index, stream)
        local = self.spec.local.for_round(round_index)  # the round's learning rate (optimizer.schedule)
        ctx = ClientContext(self.model, client_id, round_index, x, y, local.lr, state or {}, payload or {})
        data = LocalData(x, y, self.spec.model.num_classes)
        result = train_local(self.model, self.method, data, local, generator, ctx, max_steps)
        return self._update(client_id, weights, self.model, result)

    def _update(self, client_id: int, weights: Weights, model: torch.nn.Module, result: LocalResult) -> ClientUpdate:
        new = read_weights(model)
        delta = {k: v - weights[k] for k, v in new.items() if is_float_entry(v)}
        buffers = {k: v for k, v in new.items() if not is_float_entry(v)}
        return ClientUpdate(
            client_id,
            int(self.client_indices[client_id].numel()),
            result.steps,
            delta,
            buffers,
            result.metrics,
            state=result.state or None,
            extras=result.extras,
        )
