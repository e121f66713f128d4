"""The round driver: broadcast, local training on the sampled clients, aggregation, evaluation.

Knows nothing of Ray Tune or MLflow: each round's metrics go to one callback.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from raytune_fl.config import ExperimentConfig, PartitionConfig
from raytune_fl.data import ArrayDataset, load_dataset, partition, train_val_split
from raytune_fl.engine.augment import AugmentSpec
from raytune_fl.engine.diagnostics import (
    classifier_spectrum,
    client_accuracies,
    loss_decomposition,
    per_client_accuracy,
    spectrum_summary,
)
from raytune_fl.engine.local import LocalSettings, NonFiniteLossError
from raytune_fl.engine.pool import ClientLost, ClientPool, InProcessPool, TrainJob, WorkerFailure
from raytune_fl.engine.system import ClientPlan, ClientRecord, SystemModel, placed
from raytune_fl.engine.worker import ClientWorker, ModelSpec, WorkerSpec
from raytune_fl.methods import Method, build_method
from raytune_fl.types import ClientUpdate, Weights, is_float_entry
from raytune_fl.weights import load_weights, read_weights

from .fedbuff import BufferedAsync

RoundCallback = Callable[[dict[str, Any]], None]
SPECTRUM_KEY = "classifier_spectrum"  # the full spectrum, a list; the summary metrics are sv_*
CLIENT_ACC_KEY = "client_accuracy"  # each client's validation accuracy under the global model, a list
CLIENT_LOG_KEY = "client_log"  # per-client rows of the round (status, steps, simulated time), a list
PoolFactory = Callable[["FederatedData", WorkerSpec], ClientPool]


@dataclass(frozen=True)
class FederatedData:
    dataset: ArrayDataset
    train_parts: list[np.ndarray]  # per client: positions in dataset.x_train used for local training
    val_parts: list[np.ndarray]  # per client: held-out positions; their union is the validation set

    @property
    def num_clients(self) -> int:
        return len(self.train_parts)

    @property
    def val_indices(self) -> np.ndarray:
        return np.sort(np.concatenate(self.val_parts))

    @property
    def client_parts(self) -> list[np.ndarray]:
        """Each client's whole share (train and validation), as the partitioner made it."""
        return [np.sort(np.concatenate([t, v])) for t, v in zip(self.train_parts, self.val_parts)]


def prepare_data(experiment: ExperimentConfig) -> FederatedData:
    dataset = load_dataset(experiment.dataset, root=experiment.root)
    spec = experiment.partition
    parts = partition(
        spec.kind,
        dataset.y_train,
        spec.clients,
        seed=spec.seed,
        min_size=spec.min_size,
        domains=dataset.domains_train,
        **partition_kwargs(spec),
    )
    splits = [
        train_val_split(part, spec.val_fraction, seed=spec.seed * 100_003 + cid) for cid, part in enumerate(parts)
    ]
    return FederatedData(dataset, [train for train, _ in splits], [val for _, val in splits])


def partition_kwargs(spec: PartitionConfig) -> dict[str, Any]:
    """The kind-specific settings a partitioner takes (a partitioner rejects ones it does not use)."""
    if spec.kind in ("dirichlet", "quantity_skew"):
        return {"alpha": spec.alpha}
    if spec.kind == "shards":
        return {"classes_per_client": spec.classes_per_client}
    if spec.kind == "domain_split" and "alpha" in spec.model_fields_set:
        return {"alpha": spec.alpha}
    return {}


def worker_spec(experiment: ExperimentConfig, data: FederatedData, method: str, params: dict, device: str = "cpu"):
    dataset = data.dataset
    model = ModelSpec(
        experiment.model,
        dataset.in_channels,
        dataset.num_classes,
        dataset.image_size,
        experiment.resources.channels_last,
    )
    opt = experiment.optimizer
    augment = AugmentSpec(experiment.augment.crop_padding, experiment.augment.horizontal_flip)
    local = LocalSettings(
        experiment.local_epochs, experiment.batch_size, opt.lr, opt.momentum, opt.weight_decay, augment
    )
    return WorkerSpec(model, method, dict(params), local, experiment.seed, device)


def in_process_pool(data: FederatedData, spec: WorkerSpec) -> ClientPool:
    return InProcessPool(ClientWorker(spec, data.dataset.x_train, data.dataset.y_train, data.train_parts))


def sample_clients(num_clients: int, participation: float, seed: int, round_index: int) -> list[int]:
    count = max(1, round(participation * num_clients))
    if count >= num_clients:
        return list(range(num_clients))
    rng = np.random.default_rng([seed, round_index, 7])  # 7: a stream apart from the training seeds
    return sorted(int(c) for c in rng.choice(num_clients, size=count, replace=False))


@torch.no_grad()
def predict(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-sample cross-entropy and correctness of `model` in eval mode."""
    model.eval()
    device = next(model.parameters()).device
    losses, correct = [], []
    for start in range(0, x.shape[0], batch_size):
        xb, yb = x[start : start + batch_size].to(device), y[start : start + batch_size].to(device)
        logits, _ = model(xb)
        losses.append(F.cross_entropy(logits, yb, reduction="none").double().cpu())
        correct.append((logits.argmax(dim=1) == yb).cpu())
    if not losses:
        return np.zeros(0), np.zeros(0, dtype=bool)
    return torch.cat(losses).numpy(), torch.cat(correct).numpy()


def evaluate(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int) -> tuple[float, float]:
    """Mean cross-entropy and accuracy of `model` in eval mode."""
    losses, correct = predict(model, x, y, batch_size)
    n = max(len(losses), 1)
    return float(losses.sum()) / n, float(correct.sum()) / n


def mean_client_metrics(updates: Sequence[ClientUpdate]) -> dict[str, float]:
    """Sample-weighted mean of the clients' local training metrics."""
    if not updates:
        return {}
    total = sum(u.num_samples for u in updates)
    keys = updates[0].metrics.keys()
    return {
        f"train_{k}" if k in ("loss", "ce") else k: sum(u.metrics[k] * u.num_samples for u in updates) / total
        for k in keys
    }


class Federation:
    def __init__(
        self,
        experiment: ExperimentConfig,
        method: str,
        params: dict,
        pool_factory: PoolFactory = in_process_pool,
        data: FederatedData | None = None,
        device: str = "cpu",
    ) -> None:
        self.experiment = experiment
        self.data = data or prepare_data(experiment)
        dataset = self.data.dataset
        self.spec = worker_spec(experiment, self.data, method, params, device)
        # fails early on bad params; this instance holds the server side (aggregator state)
        self.method: Method = build_method(method, params, self.spec.method_context(self.data.num_clients))
        self.pool_factory = pool_factory
        self.device = torch.device(device)
        torch.manual_seed(experiment.seed)  # the same initial weights for every method and variant
        self.model = self.spec.model.build().to(self.device)
        self.weights: Weights = read_weights(self.model)
        self.client_states: dict[int, Any] = {}  # per-client method state, kept here so any worker can train any client
        sizes = [len(part) for part in self.data.train_parts]
        exp = experiment
        self.system = SystemModel(exp.system, sizes, exp.batch_size, exp.local_epochs, exp.seed)
        if experiment.system.deadline is not None and self.method.buffer_size is not None:
            raise ValueError("system.deadline: FedBuff has no round deadline (late updates are applied stale)")
        self.round = 0  # rounds completed
        self.sim_time = 0.0  # simulated clock (system heterogeneity)
        self.failures_total = 0  # worker deaths survived so far
        self.async_state: dict[str, Any] | None = None  # FedBuff's clients in flight and buffer, for checkpoints
        val = self.data.val_indices
        self.val_x, self.val_y = torch.from_numpy(dataset.x_train[val]), torch.from_numpy(dataset.y_train[val])
        # which client each validation sample belongs to: per-client accuracy comes from the same pass
        owner = np.concatenate([np.full(len(part), cid) for cid, part in enumerate(self.data.val_parts)])
        self.val_owner = owner[np.argsort(np.concatenate(self.data.val_parts), kind="stable")]
        # evaluation batches stay NCHW: the first convolution converts them, no second copy of the test set
        self.test_x, self.test_y = torch.from_numpy(dataset.x_test), torch.from_numpy(dataset.y_test)

    def evaluate(self) -> dict[str, Any]:
        load_weights(self.model, self.weights)
        size = self.experiment.eval_batch_size
        val_losses, val_correct = predict(self.model, self.val_x, self.val_y, size)
        test_loss, test_acc = evaluate(self.model, self.test_x, self.test_y, size)
        metrics: dict[str, Any] = {
            "val_loss": float(val_losses.mean()) if len(val_losses) else 0.0,
            "val_acc": float(val_correct.mean()) if len(val_correct) else 0.0,
            "test_loss": test_loss,
            "test_acc": test_acc,
        }
        if self.method.personalise is not None:
            metrics.update(self.evaluate_personalised())
        wanted = self.experiment.diagnostics
        if wanted.client_accuracy:
            metrics.update(per_client_accuracy(val_correct, self.val_owner, self.data.num_clients))
            # the full spread, for the dashboard; a list: the logger files it as an artifact, not a metric
            metrics[CLIENT_ACC_KEY] = client_accuracies(val_correct, self.val_owner, self.data.num_clients).tolist()
        if wanted.spectrum:
            spectrum = classifier_spectrum(self.weights)
            metrics.update(spectrum_summary(spectrum))
            metrics[SPECTRUM_KEY] = spectrum.tolist()  # a list: the logger files it as an artifact, not a metric
        return metrics

    def evaluate_personalised(self) -> dict[str, float]:
        """Each client's held-out samples under the model that client uses (method.personalise)."""
        size = self.experiment.eval_batch_size
        correct = np.zeros(len(self.val_y), dtype=bool)
        for cid in range(self.data.num_clients):
            mine = np.flatnonzero(self.val_owner == cid)
            if len(mine) == 0:
                continue
            load_weights(self.model, self.method.personalise(self.weights, self.client_states.get(cid, {})))
            index = torch.from_numpy(mine)
            correct[mine] = predict(self.model, self.val_x[index], self.val_y[index], size)[1]
        load_weights(self.model, self.weights)
        spread = per_client_accuracy(correct, self.val_owner, self.data.num_clients)
        return {"personal_val_acc": float(correct.mean()), **{f"personal_{k}": v for k, v in spread.items()}}

    def decompose_loss(self, start_weights: Weights, updates: Sequence[ClientUpdate], val_loss: float) -> dict:
        """FedLD's Eq. 2 for this round's clients: evaluates each client model on its own and on the global data."""
        size = self.experiment.eval_batch_size
        x, y = torch.from_numpy(self.data.dataset.x_train), torch.from_numpy(self.data.dataset.y_train)
        local, shifted = [], []
        for update in updates:
            client_weights = {
                k: start_weights[k] + update.delta[k] if k in update.delta else v for k, v in start_weights.items()
            }
            client_weights.update(update.buffers)
            load_weights(self.model, client_weights)
            own = torch.from_numpy(self.data.train_parts[update.client_id])
            local.append(evaluate(self.model, x[own], y[own], size)[0])
            shifted.append(evaluate(self.model, self.val_x, self.val_y, size)[0])
        load_weights(self.model, self.weights)
        return loss_decomposition(val_loss, local, shifted, [u.num_samples for u in updates])

    def costly_round(self, round_index: int) -> bool:
        every = self.experiment.diagnostics.every
        return every > 0 and (round_index % every == 0 or round_index == self.experiment.rounds)

    # ---- the run ---------------------------------------------------------------------------------

    def run(self, on_round: RoundCallback) -> dict[str, Any]:
        """Rounds `self.round + 1 .. rounds` (a restored federation continues where its checkpoint was taken).

        Each round's metrics go to `on_round`. A NaN/Inf loss or model ends the run with one last report
        carrying `diverged = 1` and the worst score (val_acc 0, val_loss inf), so a study moves on.
        """
        setup_started = time.perf_counter()
        pool = self.pool_factory(self.data, self.spec)
        self._on_round, self._last = on_round, {}
        self._setup_s: float | None = None
        self._failures_ahead: list[WorkerFailure] = []
        try:
            pool.ready()
            self._setup_s = time.perf_counter() - setup_started  # reported apart from round times
            if self.method.buffer_size is None:
                self._synchronous_rounds(pool)
            else:
                BufferedAsync(self, pool).run()
        except NonFiniteLossError as error:
            # from an actor the message is Ray's traceback: its last line is the original error
            lines = [line for line in str(error).splitlines() if line.strip()]
            self._report_divergence(lines[-1] if lines else type(error).__name__)
        finally:
            pool.close()
        return self._last

    def _submit_round(self, pool: ClientPool, round_index: int) -> _SubmittedRound:
        exp = self.experiment
        clients = sample_clients(self.data.num_clients, exp.participation, exp.seed, round_index)
        plans = self.system.plan(clients, round_index)
        payload = self.method.aggregator.payload()
        jobs = [
            TrainJob(p.client_id, round_index, self.weights, payload, self.client_states.get(p.client_id), p.max_steps)
            for p in plans
            if p.trains
        ]
        return _SubmittedRound(round_index, plans, [pool.submit(job) for job in jobs])

    def _synchronous_rounds(self, pool: ClientPool) -> None:
        """Each round's clients are submitted as soon as the previous model is aggregated, so a pool that trains
        in the background (Ray actors) trains round r + 1 while round r is evaluated and reported. Nothing round
        r + 1 depends on (weights, client states, the aggregator's payload) changes after aggregation."""
        started = time.perf_counter()
        current = self._submit_round(pool, self.round + 1)
        while current is not None:
            outcomes = pool.collect(current.tickets)
            by_client = {o.client_id: o for o in (outcomes[t] for t in current.tickets)}
            log = [
                ClientRecord(
                    current.index,
                    p.client_id,
                    outcome_status(by_client.get(p.client_id), p),
                    p.steps,
                    p.sim_time,
                    **placed(by_client.get(p.client_id)),
                )
                for p in current.plans
            ]
            updates = [o for o in by_client.values() if isinstance(o, ClientUpdate)]
            self.sim_time += self.system.round_duration(current.plans)
            start_weights = self.weights
            updates = self.apply_round(current.index, updates)
            upcoming = None
            if current.index < self.experiment.rounds:
                upcoming = self._submit_round(pool, current.index + 1)
            self.report_round(current.index, start_weights, updates, log, pool, started)
            # a round's time runs from the end of the previous evaluation: rounds tile the run
            # (docs/explanation/workload.md#what-is-timed)
            started, current = self._evaluated_at, upcoming

    def finish_round(
        self,
        round_index: int,
        updates: Sequence[ClientUpdate],
        log: Sequence[ClientRecord],
        pool: ClientPool,
        started: float,
    ) -> None:
        """Aggregate, evaluate and report round `round_index` (FedBuff's schedule; the synchronous one overlaps)."""
        start_weights = self.weights
        updates = self.apply_round(round_index, updates)
        self.report_round(round_index, start_weights, updates, log, pool, started)

    def apply_round(self, round_index: int, updates: Sequence[ClientUpdate]) -> list[ClientUpdate]:
        """Keep client states and aggregate; returns the updates in client order."""
        # client order, not arrival order: float sums must not depend on which actor was faster
        updates = sorted(updates, key=lambda u: u.client_id)
        for update in updates:
            if update.state is not None:
                self.client_states[update.client_id] = update.state
        started = time.perf_counter()
        if updates:  # everyone dropped, late or lost: the model stays as it was
            self.weights = self.method.aggregate(self.weights, updates)
        self._aggregate_s = time.perf_counter() - started
        if not all(np.isfinite(v).all() for v in self.weights.values() if is_float_entry(v)):
            raise NonFiniteLossError("the aggregated model has NaN/Inf weights")
        self.round = round_index
        return updates

    def report_round(
        self,
        round_index: int,
        start_weights: Weights,
        updates: Sequence[ClientUpdate],
        log: Sequence[ClientRecord],
        pool: ClientPool,
        started: float,
    ) -> None:
        """Evaluate the aggregated model and report round `round_index`."""
        # the next round may already be training: its worker failures are reported with it
        drained = self._failures_ahead + pool.drain_failures()
        failures = [f for f in drained if f.round_index <= round_index]
        self._failures_ahead = [f for f in drained if f.round_index > round_index]
        self.failures_total += len(failures)
        metrics: dict[str, Any] = {"round": round_index, **self.evaluate()}
        if not math.isfinite(metrics["val_loss"]):
            raise NonFiniteLossError(f"validation loss is {metrics['val_loss']}")
        metrics.update(mean_client_metrics(updates))
        counts = Counter(record.status for record in log)
        metrics.update(
            clients=len(updates),
            clients_sampled=len(log),
            clients_dropped=counts["dropped"],
            clients_late=counts["late"],
            clients_lost=counts["lost"],
            actor_failures=len(failures),
            actor_failures_total=self.failures_total,
        )
        if self.experiment.system.active or self.method.buffer_size is not None:
            metrics["sim_time"] = self.sim_time
        if self.method.buffer_size is not None:
            staleness = [u.staleness for u in updates]
            metrics.update(staleness_mean=float(np.mean(staleness)), staleness_max=max(staleness))
        metrics[CLIENT_LOG_KEY] = [dataclasses.asdict(record) for record in log]  # filed as an artifact
        self._evaluated_at = time.perf_counter()
        metrics["round_time_s"] = self._evaluated_at - started  # diagnostics below are timed apart
        metrics["aggregate_s"] = self._aggregate_s  # part of round_time_s
        if self.experiment.diagnostics.decomposition and self.costly_round(round_index) and updates:
            started = time.perf_counter()
            metrics.update(self.decompose_loss(start_weights, updates, metrics["val_loss"]))
            metrics["decomposition_s"] = time.perf_counter() - started
            self._evaluated_at += metrics["decomposition_s"]  # timed apart: not part of the next round either
        if self._setup_s is not None:
            metrics["setup_s"], self._setup_s = self._setup_s, None
        self._last = metrics
        self._on_round(metrics)

    def _report_divergence(self, reason: str) -> None:
        metrics: dict[str, Any] = {
            "round": self.round + 1 if self.round < self.experiment.rounds else self.round,
            "diverged": 1.0,
            "val_acc": 0.0,  # the worst score, so the searcher learns to avoid this region
            "val_loss": float("inf"),
            "divergence": reason,
        }
        self._last = metrics
        self._on_round(metrics)

    # ---- checkpoints -----------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything the next round depends on. Random streams are keyed by (seed, round, client): no RNG state."""
        return {
            "round": self.round,
            "weights": self.weights,
            "client_states": self.client_states,
            "aggregator": self.method.aggregator.state_dict(),
            "sim_time": self.sim_time,
            "failures_total": self.failures_total,
            "asynchronous": self.async_state,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.round = int(state["round"])
        self.weights = dict(state["weights"])
        self.client_states = dict(state["client_states"])
        self.method.aggregator.load_state_dict(state["aggregator"])
        self.sim_time = float(state["sim_time"])
        self.failures_total = int(state["failures_total"])
        self.async_state = state.get("asynchronous")


@dataclass(frozen=True)
class _SubmittedRound:
    index: int
    plans: list[ClientPlan]
    tickets: list[int]


def outcome_status(outcome: Any, plan: ClientPlan) -> str:
    if not plan.trains:
        return plan.status
    return "lost" if isinstance(outcome, ClientLost) else "trained"
