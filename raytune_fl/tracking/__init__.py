"""The MLflow layer: imports MLflow, never Ray. Written from the driver process only.

schema.py: tag names and values, artifact paths, the params codec (plain Python); store.py: every read of the
store; records.py: every record a run is written from (pure: no MLflow); tracker.py: the experiment and its parent
runs (StudyTracker, its parent_run context manager); trials.py: the child run of each trial (TrialTracker). The
names below load on first use, so that importing schema.py alone imports neither MLflow nor the engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from raytune_fl.tracking.records import RunRecord
    from raytune_fl.tracking.tracker import ParentRun, StudyTracker
    from raytune_fl.tracking.trials import TrialTracker
    from raytune_fl.tracking.uri_check import default_tracking_uri

_HOMES = {
    "ParentRun": "tracker",
    "StudyTracker": "tracker",
    "default_tracking_uri": "uri_check",  # standard library only: the commands' checks import no MLflow
    "RunRecord": "records",
    "TrialTracker": "trials",
}
__all__ = ["ParentRun", "RunRecord", "StudyTracker", "TrialTracker", "default_tracking_uri"]


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
