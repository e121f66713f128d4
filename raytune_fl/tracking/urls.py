"""Links into the MLflow UI (standard library only): what the CLI prints after a study, and what tools/mlflow_ui.py
opens in a browser.

MLflow 3.10-3.17 open an experiment on the page of the browser's stored *workflow type* (GenAI until switched);
in 3.17 `?workflowType=machine_learning` overrides it, so every link carries that parameter.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Sequence

WORKFLOW = ("workflowType", "machine_learning")  # the UI's "Model training" side: opens on the runs table


def _url(server: str, fragment: str, query: dict[str, str]) -> str:
    return f"{server.rstrip('/')}/#/{fragment}?{urllib.parse.urlencode({**query, WORKFLOW[0]: WORKFLOW[1]})}"


def runs_url(server: str, experiment_id: str, charts: bool = False) -> str:
    """The experiment's runs table (or its chart view), on the UI's "Model training" side."""
    return _url(server, f"experiments/{experiment_id}/runs", {"compareRunsMode": "CHART"} if charts else {})


def compare_url(server: str, experiment_id: str, run_ids: Sequence[str]) -> str:
    """The compare view of these runs (parallel coordinates, scatter, box and contour plots, then the tables)."""
    return _url(server, "compare-runs", {"runs": json.dumps(list(run_ids)), "experiments": json.dumps([experiment_id])})
