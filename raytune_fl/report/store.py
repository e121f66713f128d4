"""The report's reading API: each variant's latest tuned study, and the runs of an ablation.

The reads themselves live in `raytune_fl.tracking.store` (the one module that reads MLflow); the names are kept
here for the report's import paths.
"""

from raytune_fl.tracking.store import (
    RESULT_METRICS,
    StudyRecord,
    ablation_results,
    experiment_id,
    latest_study,
    parse_tag_value,
    search_all,
)

__all__ = [
    "RESULT_METRICS",
    "StudyRecord",
    "ablation_results",
    "experiment_id",
    "latest_study",
    "parse_tag_value",
    "search_all",
]
