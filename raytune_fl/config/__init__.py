"""Validated experiment and search-space models. Every error names the offending field.

Defaults live here, each with a one-line reason, so a YAML file only states what differs. The package: base.py (the
error, the strict model base, seeds), experiment.py (one run's settings), space.py (variants, tune settings, the
file's model), io.py (YAML loading, error formatting, overrides, flattening), trial.py (TrialSpec); every public
name is imported from here (`from raytune_fl.config import ExperimentConfig`).
"""

from __future__ import annotations

from raytune_fl.config.base import (
    ConfigError,
    Seed,
    did_you_mean,
)
from raytune_fl.config.experiment import (
    AugmentConfig,
    BatchNormConfig,
    DiagnosticsConfig,
    ExperimentConfig,
    FaultsConfig,
    OptimizerConfig,
    PartitionConfig,
    PersonaliseConfig,
    PrivacyConfig,
    ReproducibilityConfig,
    ResourcesConfig,
    ScheduleConfig,
    ScheduleKind,
    SystemConfig,
    check_client_count,
    clients_per_round,
    smallest_participation,
)
from raytune_fl.config.io import (
    DuplicateKeyError,
    OctalNumberError,
    UniqueKeyLoader,
    flatten,
    format_validation_error,
    load_space,
    load_yaml,
    override,
    parse_space,
)
from raytune_fl.config.schedule import ParamSchedule, Segment
from raytune_fl.config.space import (
    MLFLOW_SOURCE,
    OBJECTIVES,
    PREVIOUS_SETTING,
    AshaConfig,
    Distribution,
    HyperbandConfig,
    MedianConfig,
    Mode,
    Objective,
    PbtConfig,
    SchedulerConfig,
    SearchSpace,
    TuneSettings,
    VariantConfig,
    WarmStart,
)
from raytune_fl.config.trial import (
    TrialSpec,
    VariantTrials,
)

# the synthetic dataset's settings live beside its builder (the data package never imports this package)
from raytune_fl.data.synthetic import SyntheticConfig

__all__ = [
    "SyntheticConfig",
    "ConfigError",
    "did_you_mean",
    "Seed",
    "PartitionConfig",
    "ScheduleKind",
    "ScheduleConfig",
    "OptimizerConfig",
    "AugmentConfig",
    "ResourcesConfig",
    "PrivacyConfig",
    "ReproducibilityConfig",
    "FaultsConfig",
    "SystemConfig",
    "DiagnosticsConfig",
    "BatchNormConfig",
    "PersonaliseConfig",
    "ExperimentConfig",
    "check_client_count",
    "clients_per_round",
    "smallest_participation",
    "Distribution",
    "VariantConfig",
    "AshaConfig",
    "HyperbandConfig",
    "MedianConfig",
    "SchedulerConfig",
    "PbtConfig",
    "ParamSchedule",
    "Segment",
    "OBJECTIVES",
    "Mode",
    "Objective",
    "TuneSettings",
    "WarmStart",
    "PREVIOUS_SETTING",
    "MLFLOW_SOURCE",
    "SearchSpace",
    "format_validation_error",
    "parse_space",
    "DuplicateKeyError",
    "OctalNumberError",
    "UniqueKeyLoader",
    "load_yaml",
    "load_space",
    "override",
    "flatten",
    "TrialSpec",
    "VariantTrials",
]
