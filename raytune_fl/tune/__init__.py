"""The Ray Tune layer: a search-space variant becomes an Optuna-driven, ASHA-scheduled Tune study."""

from raytune_fl.tune.study import VariantOutcome, run_variant

__all__ = ["VariantOutcome", "run_variant"]
