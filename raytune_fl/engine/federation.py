"""The round driver: broadcast, local training on the sampled clients, aggregation, evaluation.

Knows nothing of Ray Tune or MLflow: each round's metrics go to one callback. Which clients train on which
model, and when their updates make a round, is the schedule's (engine/schedules.py): synchronous rounds, or
FedBuff's buffered asynchronous rounds. Data preparation is in engine/data.py, scoring in engine/evaluation.py.
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from raytune_fl.aggregators.fedavg import fedavg, plain_mean_statistics
from raytune_fl.aggregators.partial import fedavg_of_sums
from raytune_fl.config import ExperimentConfig, TrialSpec, clients_per_round
from raytune_fl.devices import reproducible
from raytune_fl.engine.augment import AugmentSpec
from raytune_fl.engine.batched import auto_client_batch
from raytune_fl.engine.data import FederatedData, prepare_data
from raytune_fl.engine.evaluation import (
    Evaluator,
    mean_client_metrics,
)
from raytune_fl.engine.fedbuff import BufferedAsync
from raytune_fl.engine.finetune import FinetuneRun
from raytune_fl.engine.local import LocalSettings, NonFiniteLossError
from raytune_fl.engine.lr_schedule import LrSchedule
from raytune_fl.engine.pool import ClientPool, InProcessPool, WorkerFailure
from raytune_fl.engine.privacy import CentralPrivacy, LocalLedger, mechanism_noise
from raytune_fl.engine.report import CLIENT_LOG_KEY, RoundReport
from raytune_fl.engine.schedules import Schedule
from raytune_fl.engine.steps import LocalPrivacy
from raytune_fl.engine.synchronous import SynchronousRounds
from raytune_fl.engine.system import ClientRecord, SystemModel
from raytune_fl.engine.traffic import upload_metrics
from raytune_fl.engine.worker import ClientWorker, ModelSpec, WorkerSpec
from raytune_fl.errors import RaytuneFLError
from raytune_fl.methods import METHODS, Method, build_method
from raytune_fl.methods.base import Finetune, Stateless
from raytune_fl.metrics import (
    ACTOR_FAILURES,
    ACTOR_FAILURES_TOTAL,
    AGGREGATE_S,
    CLIENT_ACC_BOTTOM10,
    CLIENT_ACC_MEAN,
    CLIENT_ACC_STD,
    CLIENT_ACC_VAR,
    CLIENT_ACC_WORST,
    CLIENTS,
    CLIENTS_DROPPED,
    CLIENTS_LATE,
    CLIENTS_LOST,
    CLIENTS_SAMPLED,
    DECOMPOSITION_S,
    DIVERGED,
    DIVERGENCE_KEY,
    EVALUATE_S,
    PERSONAL_VAL_ACC,
    ROUND,
    ROUND_TIME_S,
    SETUP_S,
    TEST_LOSS,
    VAL_ACC,
    VAL_LOSS,
)
from raytune_fl.models.registry import SEQUENTIAL_MODELS, sample_batch
from raytune_fl.types import ClientUpdate, Weights, is_float_entry
from raytune_fl.weights import read_weights

RoundCallback = Callable[[RoundReport], None]
# a diverged run's client spread: accuracies of 0, and the largest spread accuracies in [0, 1] can have
WORST_CLIENT_SPREAD = {
    CLIENT_ACC_MEAN: 0.0,
    CLIENT_ACC_WORST: 0.0,
    CLIENT_ACC_BOTTOM10: 0.0,
    CLIENT_ACC_STD: 0.5,
    CLIENT_ACC_VAR: 0.25,
}
PoolFactory = Callable[[FederatedData, WorkerSpec], ClientPool]


class NoLocalStepError(RuntimeError, RaytuneFLError):
    """A round whose reporting clients all took no optimiser step: nothing trained, and its train_loss would read
    0.0 as if it had. engine/data.py's check_steps refuses such partitions before Ray; this catches the rest."""


def worker_spec(
    experiment: ExperimentConfig, data: FederatedData, method: str, params: dict, device: str = "cpu"
) -> WorkerSpec:
    dataset = data.dataset
    channels, size = dataset.model_inputs
    nhwc = experiment.resources.channels_last and not dataset.is_text  # a layout of images: nothing to do on text
    model = ModelSpec(experiment.model, channels, dataset.num_classes, size, nhwc, dataset.is_text)
    batch = client_batch(experiment, data, method, model)
    private = local_privacy(experiment, data)
    # torch's vmap cannot run channels-last kernels ("NYI: querying is_contiguous inside of vmap"); DP-SGD vmaps too
    if batch > 1 or private is not None:
        model = dataclasses.replace(model, channels_last=False)
    opt = experiment.optimizer
    augment = AugmentSpec(experiment.augment.crop_padding, experiment.augment.horizontal_flip)
    local = LocalSettings(
        experiment.local_epochs,
        experiment.batch_size,
        opt.lr,
        opt.momentum,
        opt.weight_decay,
        augment,
        drop_last=experiment.drop_last,
        bn_running=experiment.batchnorm.local_training == "running",
        schedule=LrSchedule.of(opt.schedule, experiment.rounds),
        probe_rounds=frozenset() if private is not None else probe_rounds(experiment),  # unprivatised gradients
        precision=experiment.precision,
        privacy=private,
    )
    local_statistics = experiment.batchnorm.aggregate == "local"
    deterministic = experiment.reproducibility.deterministic
    return WorkerSpec(
        model,
        method,
        dict(params),
        local,
        experiment.seed,
        device,
        local_statistics=local_statistics,
        deterministic=deterministic,
        client_batch=batch,
    )


def local_privacy(experiment: ExperimentConfig, data: FederatedData) -> LocalPrivacy | None:
    """privacy.mechanism: local's clip and noise for the clients' DP-SGD (the noise given, or derived from
    target_epsilon over these clients: engine/privacy.py); None without it."""
    p = experiment.privacy
    if p is None or experiment.privacy_mechanism != "local":
        return None
    return LocalPrivacy(p.clip_norm, mechanism_noise(experiment, [len(part) for part in data.train_parts]))


def probe_rounds(experiment: ExperimentConfig) -> frozenset[int]:
    """The rounds whose local training measures the gradient norms (diagnostics.gradient_norms: the costly ones)."""
    diagnostics, rounds = experiment.diagnostics, experiment.rounds
    if not diagnostics.gradient_norms:
        return frozenset()
    return frozenset(r for r in range(1, rounds + 1) if diagnostics.costly(r, rounds))


class EngineNotice(UserWarning):
    """Something the engine decided that a user should know (e.g. clients trained one at a time). A warning, never a
    print: the caller decides how to show it, filter it or make it an error. In a Tune trial Python's default filter
    writes it to stderr, which Ray forwards to the driver: once per trial, as weights.py's catch_warnings resets the
    once-per-line record."""


def client_batch(experiment: ExperimentConfig, data: FederatedData, method: str, model: ModelSpec) -> int:
    """resources.client_batch resolved: `auto` sized to client_batch_memory_gb where the clients train on a GPU and
    1 on the CPU (where batching measured slower: docs/how-to/client-batching.md); 1 for a method that cannot batch
    (with an EngineNotice warning); at most the clients a round trains (the command said so before Ray started:
    cli/common.py's client_batch_note; pool.py's client_batches never forms a wider batch, so training is the same)."""
    resources = experiment.resources
    if resources.client_batch == 1:
        return 1
    reason = METHODS.get(method).sequential or SEQUENTIAL_MODELS.get(experiment.model, "")
    if experiment.privacy_mechanism == "local":
        reason = "local DP-SGD clips each sample's gradient in the one-client loop only"
    if reason:
        # stacklevel 2: the notice names the call that resolved the batch (worker_spec), not this line
        warnings.warn(
            f"resources.client_batch: {method} trains its clients one at a time ({reason})", EngineNotice, stacklevel=2
        )
        return 1
    if resources.client_batch == "auto" and (resources.device == "cpu" or not resources.gpus_per_actor):
        return 1  # the clients train on the CPU
    per_round = clients_per_round(experiment.participation, data.num_clients)
    if resources.client_batch != "auto":
        return min(int(resources.client_batch), per_round)
    shape = sample_batch(model.in_channels, model.image_size, model.text)[1:]  # one sample, estimated on the CPU
    sample = torch.zeros(shape, dtype=torch.long if model.text else torch.float32, device="cpu")
    return auto_client_batch(model.build(), sample, experiment.batch_size, resources.client_batch_memory_gb, per_round)


def partial_sums(experiment: ExperimentConfig, method: Method) -> bool:
    """resources.partial_sums resolved: on where the method aggregates by FedAvg's own rule, the weighted sum that
    splits by worker (aggregators/partial.py); for any other rule an EngineNotice, and a delta per client."""
    if not experiment.resources.partial_sums:
        return False
    if experiment.privacy_mechanism == "central":
        warnings.warn(
            "resources.partial_sums: under privacy.mechanism central each client's update is clipped on its own "
            "before the sum; each client sends its own delta",
            EngineNotice,
            stacklevel=2,
        )
        return False
    aggregator = method.aggregator
    if method.buffer_size is None and isinstance(aggregator, Stateless) and aggregator.function is fedavg:
        return True
    warnings.warn(
        f"resources.partial_sums: {method.name} aggregates by its own rule, not FedAvg's weighted sum; each client "
        "sends its own delta",
        EngineNotice,
        stacklevel=2,
    )
    return False


def evaluation_finetune(experiment: ExperimentConfig, method: Method) -> Finetune | None:
    """The fine-tuning the evaluator runs: the config's personalise.finetune_steps where set (it wins over the
    method's own, FedBABU's, so that one setting compares any methods), else the method's; None: off."""
    steps = experiment.personalise.finetune_steps
    return Finetune(steps=steps) if steps > 0 else method.finetune


def in_process_pool(data: FederatedData, spec: WorkerSpec) -> ClientPool:
    return InProcessPool(ClientWorker(spec, data.dataset.x_train, data.dataset.y_train, data.train_parts))


def privacy_of(experiment: ExperimentConfig, sizes: list[int]) -> CentralPrivacy | LocalLedger | None:
    """The server's side of base.privacy: the private aggregation and ledger (central), or the ledger (local)."""
    if experiment.privacy is None:
        return None
    noise = mechanism_noise(experiment, sizes)
    if experiment.privacy.mechanism == "central":
        return CentralPrivacy(experiment, noise, len(sizes))
    return LocalLedger(experiment, noise, sizes)


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
        self.spec = worker_spec(experiment, self.data, method, params, device)
        # fails early on bad params; this instance holds the server side (aggregator state)
        mean_size = sum(map(len, self.data.train_parts)) / self.data.num_clients
        self.method: Method = build_method(method, params, self.spec.method_context(self.data.num_clients, mean_size))
        self.partial_sums = partial_sums(experiment, self.method)
        self.pool_factory = pool_factory
        self.device = torch.device(device)
        reproducible(experiment.reproducibility.deterministic)  # this process evaluates (and trains in-process)
        torch.manual_seed(experiment.seed)  # the same initial weights for every method and variant
        self.model = self.spec.model.build().to(self.device)
        self.weights: Weights = read_weights(self.model)
        self.client_states: dict[int, Any] = {}  # per-client method state, kept here so any worker can train any client
        sizes = [len(part) for part in self.data.train_parts]
        exp = experiment
        self.system = SystemModel(exp.system, sizes, exp.batch_size, exp.local_epochs, exp.seed, exp.drop_last)
        self.schedule: Schedule  # FedBuff's buffered asynchronous rounds when the method buffers updates
        if self.method.buffer_size is None:
            self.schedule = SynchronousRounds(report_clock=exp.system.active)
        else:
            self.schedule = BufferedAsync(exp, self.data.num_clients, self.method.buffer_size)
        self.round = 0  # rounds completed
        self.failures_total = 0  # worker deaths survived so far
        finetune = FinetuneRun.of(evaluation_finetune(exp, self.method), self.spec, self.data)
        self.evaluator = Evaluator(self.data, self.model, exp.eval_batch_size, exp.diagnostics, exp.precision, finetune)
        self.privacy = privacy_of(exp, sizes)

    @classmethod
    def of(cls, trial: TrialSpec, **kwargs: Any) -> Federation:
        """The federation of a resolved trial (config.TrialSpec); `kwargs` as for the constructor."""
        return cls(trial.experiment, trial.method, trial.params, **kwargs)

    # the held-out data, as tensors (the evaluator's)
    @property
    def val_x(self) -> torch.Tensor:
        return self.evaluator.val_x

    @property
    def val_y(self) -> torch.Tensor:
        return self.evaluator.val_y

    @property
    def val_owner(self) -> np.ndarray:
        return self.evaluator.val_owner

    @property
    def test_x(self) -> torch.Tensor:
        return self.evaluator.test_x

    @property
    def test_y(self) -> torch.Tensor:
        return self.evaluator.test_y

    def evaluate(self) -> dict[str, Any]:
        """The global model's metrics (and cheap diagnostics) now."""
        extra = self.method.aggregator.extra_models()
        return self.evaluator.evaluate(self.weights, self.method.personalise, self.client_states, extra, self.round)

    def costly_round(self, round_index: int) -> bool:
        return self.experiment.diagnostics.costly(round_index, self.experiment.rounds)

    def sums_round(self, round_index: int) -> bool:
        """Whether round `round_index`'s workers send partial sums: where they are on, except on the rounds whose
        loss decomposition evaluates every client's own model (costly ones; report_round runs it on the evaluated
        among them, so this keeps the deltas on a few rounds too many, never too few)."""
        decomposes = self.experiment.diagnostics.decomposition and self.costly_round(round_index)
        return self.partial_sums and not decomposes

    # ---- the run ---------------------------------------------------------------------------------

    def run(self, on_round: RoundCallback) -> RoundReport | None:
        """Rounds `self.round + 1 .. rounds` (a restored federation continues where its checkpoint was taken).

        Each round's report goes to `on_round` (the last one is returned; None: no round ran). A NaN/Inf loss or
        model ends the run with one last report carrying `diverged = 1` and the worst score (val_acc 0, val_loss
        inf), so a study moves on.
        """
        setup_started = time.perf_counter()
        pool = self.pool_factory(self.data, self.spec)
        self._on_round = on_round
        self._last: RoundReport | None = None
        self._setup_s: float | None = None
        self._failures_ahead: list[WorkerFailure] = []
        try:
            pool.ready()
            self._setup_s = time.perf_counter() - setup_started  # reported apart from round times
            self.schedule.run(self, pool)
        except NonFiniteLossError as error:
            # from an actor the message is Ray's traceback: its last line is the original error
            lines = [line for line in str(error).splitlines() if line.strip()]
            self._report_divergence(lines[-1] if lines else type(error).__name__)
        finally:
            pool.close()
        return self._last

    def apply_round(self, round_index: int, updates: Sequence[ClientUpdate]) -> list[ClientUpdate]:
        """Keep client states and aggregate; returns the updates in client order."""
        # client order, not arrival order: float sums must not depend on which actor was faster
        updates = sorted(updates, key=lambda u: u.client_id)
        if updates and not any(update.num_steps for update in updates):
            exp = self.experiment
            shown = ", ".join(f"client {u.client_id}: {u.num_samples}" for u in updates[:5])
            raise NoLocalStepError(
                f"round {round_index}: none of the {len(updates)} clients that reported took a local step (training "
                f"samples {shown}{', ...' * (len(updates) > 5)}; base.batch_size {exp.batch_size}, base.drop_last "
                f"{str(exp.drop_last).lower()}): nothing trained; lower base.batch_size, set base.drop_last: false or "
                "raise base.partition.min_size"
            )
        for update in updates:
            if update.state is not None:
                self.client_states[update.client_id] = update.state
        started = time.perf_counter()
        plain_statistics = self.experiment.batchnorm.aggregate == "mean"
        if isinstance(self.privacy, CentralPrivacy):  # every round, one that drew nobody too: noise alone
            self.weights = self.privacy.aggregate(self.method, self.weights, updates, round_index)
        elif updates and updates[0].summed is not None:  # partial sums: FedAvg's rule, split by worker
            self.weights = fedavg_of_sums(self.weights, updates, plain_statistics)
        elif updates:  # everyone dropped, late or lost: the model stays as it was
            start = self.weights
            self.weights = self.method.aggregate(start, updates)
            if plain_statistics:
                self.weights = plain_mean_statistics(start, self.weights, updates)
            for client_id, state in self.method.aggregator.client_states().items():  # FedPAC's mixed classifiers
                self.client_states[client_id] = {**(self.client_states.get(client_id) or {}), **state}
        if isinstance(self.privacy, LocalLedger):
            self.privacy.record(updates)
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
    ) -> float:
        """Evaluate the aggregated model and report round `round_index`; returns when the timed part ended
        (the next round's time runs from there)."""
        # the next round may already be training: its worker failures are reported with it
        drained = self._failures_ahead + pool.drain_failures()
        failures = [f for f in drained if f.round_index <= round_index]
        self._failures_ahead = [f for f in drained if f.round_index > round_index]
        self.failures_total += len(failures)
        evaluate_started = time.perf_counter()
        # between evaluations: training figures only. A run's first round is evaluated too (a resumed one's
        # included), so every report after it has a score to carry (tune/trainable.py)
        evaluated = self.experiment.evaluates(round_index) or self._last is None
        metrics: dict[str, Any] = {ROUND: round_index, **(self.evaluate() if evaluated else {})}
        evaluate_s = time.perf_counter() - evaluate_started
        watched = VAL_LOSS if len(self.evaluator.val_y) else TEST_LOSS  # no validation split: its loss is NaN
        if evaluated and not math.isfinite(metrics[watched]):
            raise NonFiniteLossError(f"{'validation' if watched == VAL_LOSS else 'test'} loss is {metrics[watched]}")
        metrics.update(mean_client_metrics(updates))
        metrics.update(upload_metrics(updates))  # what the aggregated clients sent, on every schedule
        if updates:
            metrics.update(self.method.aggregator.metrics())
        counts = Counter(record.status for record in log)
        metrics.update(
            {
                CLIENTS: len(updates),
                CLIENTS_SAMPLED: len(log),
                CLIENTS_DROPPED: counts["dropped"],
                CLIENTS_LATE: counts["late"],
                CLIENTS_LOST: counts["lost"],
                ACTOR_FAILURES: len(failures),
                ACTOR_FAILURES_TOTAL: self.failures_total,
            }
        )
        metrics.update(self.schedule.round_metrics(updates))  # the simulated clock; FedBuff's staleness
        if self.privacy is not None:
            metrics.update(self.privacy.round_metrics(round_index, updates))  # epsilon so far
        metrics[CLIENT_LOG_KEY] = [dataclasses.asdict(record) for record in log]  # filed as an artifact
        evaluated_at = time.perf_counter()
        metrics[ROUND_TIME_S] = evaluated_at - started  # diagnostics below are timed apart
        metrics[AGGREGATE_S] = self._aggregate_s  # part of round_time_s
        metrics[EVALUATE_S] = evaluate_s  # part of round_time_s: the global (and personalised) evaluation
        # the decomposition starts from this round's validation loss: on evaluated rounds only
        if self.experiment.diagnostics.decomposition and self.costly_round(round_index) and updates and evaluated:
            started = time.perf_counter()
            metrics.update(self.evaluator.decompose_loss(self.weights, start_weights, updates, metrics[VAL_LOSS]))
            metrics[DECOMPOSITION_S] = time.perf_counter() - started
            evaluated_at += metrics[DECOMPOSITION_S]  # timed apart: not part of the next round either
        if self._setup_s is not None:
            metrics[SETUP_S], self._setup_s = self._setup_s, None
        self._last = RoundReport.from_result(metrics)
        self._on_round(self._last)
        return evaluated_at

    def _report_divergence(self, reason: str) -> None:
        metrics: dict[str, Any] = {
            ROUND: self.round + 1 if self.round < self.experiment.rounds else self.round,
            DIVERGED: 1.0,
            VAL_ACC: 0.0,  # the worst score, so the searcher learns to avoid this region
            PERSONAL_VAL_ACC: 0.0,  # its clients' own models: as bad (every method reports it)
            VAL_LOSS: float("inf"),
            DIVERGENCE_KEY: reason,
        }
        # every objective a study may select on is in the report (Tune's searcher requires each one): the client
        # spread at its worst possible value, and the budget the run spent up to this round
        if self.experiment.diagnostics.client_accuracy:
            metrics.update(WORST_CLIENT_SPREAD)
        if self.privacy is not None:
            metrics.update(self.privacy.round_metrics(metrics[ROUND], []))
        self._last = RoundReport.from_result(metrics)
        self._on_round(self._last)

    # ---- checkpoints -----------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything the next round depends on. Random streams are keyed by (seed, round, client): no RNG state."""
        return {
            "round": self.round,  # not-a-metric: the checkpoint's key, kept apart from the report's name
            "weights": self.weights,
            "client_states": self.client_states,
            "aggregator": self.method.aggregator.state_dict(),
            "failures_total": self.failures_total,
            **self.schedule.state_dict(),  # sim_time; "asynchronous": FedBuff's clients in flight and buffer
            # local DP's steps per client (what epsilon is counted from); absent without privacy, as before it existed
            **({"privacy": self.privacy.state_dict()} if self.privacy is not None else {}),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.round = int(state["round"])  # not-a-metric: the checkpoint's key
        self.weights = dict(state["weights"])
        self.client_states = dict(state["client_states"])
        self.method.aggregator.load_state_dict(state["aggregator"])
        self.failures_total = int(state["failures_total"])
        self.schedule.load_state_dict(state)
        if self.privacy is not None:
            self.privacy.load_state_dict(state["privacy"])
