"""Links into the MLflow UI (standard library only): what the CLI prints after a study, and what tools/mlflow_ui.py
opens in a browser.

MLflow 3.10-3.17 open an experiment on the page of the browser's stored *workflow type* (GenAI until switched);
in 3.17 `?workflowType=machine_learning` overrides it, so every link carries that parameter.
"""

from __future__ import annotations

import urllib.parse

WORKFLOW = ("workflowType", "machine_learning")  # the UI's "Model training" side: opens on the runs table


def ui_url(server: str, fragment: str, query: dict[str, str]) -> str:
    """The UI's page `fragment` with `query`, on the "Model training" side (tools/mlflow_ui.py builds its own)."""
    return f"{server.rstrip('/')}/#/{fragment}?{urllib.parse.urlencode({**query, WORKFLOW[0]: WORKFLOW[1]})}"


def runs_url(server: str, experiment_id: str, charts: bool = False) -> str:
    """The experiment's runs table (or its chart view), on the UI's "Model training" side."""
    return ui_url(server, f"experiments/{experiment_id}/runs", {"compareRunsMode": "CHART"} if charts else {})
