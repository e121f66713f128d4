"""The MLflow layer. Written from the Tune driver process only."""

from raytune_fl.tracking.mlflow_tracking import (
    MlflowTrialLogger,
    StudyTracker,
    default_tracking_uri,
    round_metrics,
)

__all__ = ["MlflowTrialLogger", "StudyTracker", "default_tracking_uri", "round_metrics"]
