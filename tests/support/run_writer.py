"""The RunWriter a TrialTracker needs, on a real MLflow store: runs and metrics go to MLflow, the rest is dropped."""

from __future__ import annotations

from typing import Any

from mlflow.tracking import MlflowClient


class RunWriter:
    def __init__(self, client: MlflowClient, experiment: str) -> None:
        self.client = client
        self.experiment_id = client.create_experiment(experiment)

    def log_params(self, run_id: str, params: dict[str, Any]) -> None:
        pass

    def log_datasets(self, run_id: str, identities: list) -> None:
        pass

    def describe(self, run_id: str, text: str) -> None:
        pass
