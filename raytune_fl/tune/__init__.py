"""The Ray Tune layer: a search-space variant becomes an Optuna-driven, ASHA-scheduled Tune study.

The only package that imports Ray Tune and Optuna (tests/source/test_layering.py). `run_variant`, its
`StudyOptions` and `VariantOutcome` are loaded on first use, so that its light modules (space.py, events.py) do not
import Ray Tune.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from raytune_fl.tune.study import StudyOptions, VariantOutcome, run_variant

__all__ = ["StudyOptions", "VariantOutcome", "run_variant"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from raytune_fl.tune import study

        return getattr(study, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
