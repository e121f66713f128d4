"""Trained global models as MLflow PyTorch models, on the run that trained them.

Saved as a `torch.export` program ("pt2"): loading needs torch only (not this package, no pickle), with
`mlflow.pytorch.load_model("models:/<model_id>")`. The model takes a batch of images (N, C, H, W) float32,
normalised as the dataset is (a text dataset's: token ids (N, L) int64), and returns logits (N, classes); the
signature says so.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import mlflow.pytorch
import numpy as np
import torch
from mlflow.entities import LoggedModelOutput
from mlflow.models import infer_signature
from mlflow.tracking import MlflowClient
from mlflow.tracking._tracking_service.utils import _use_tracking_uri

from raytune_fl.tracking.schema import MODEL_NAME, TAG_MODEL_ID


class Logits(torch.nn.Module):
    """Our models return (logits, z); a served classifier returns the logits."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)[0]


def log_model(
    client: MlflowClient,
    run_id: str,
    model: torch.nn.Module,
    example: np.ndarray,
    *,
    step: int,
    linked_runs: Iterable[str] = (),
    tags: dict[str, Any] | None = None,
) -> str:
    """`model` (in eval mode, on the CPU) logged to `run_id` at `step` (the round it was trained to); also listed
    as an output of each run in `linked_runs` (a study's parent). Returns the model id."""
    module, options = _as_served(model.cpu(), example)
    run = client.get_run(run_id)
    with _quiet_mlflow():
        # made here, in the run's experiment: MLflow's log_model would file it under the process's current
        # experiment (Default, with its artifacts in ./mlruns) since we keep no active run
        logged = client.create_logged_model(
            experiment_id=run.info.experiment_id,
            name=MODEL_NAME,
            source_run_id=run_id,
            params=dict(run.data.params),
            tags={k: str(v) for k, v in (tags or {}).items()},
        )
        with _use_tracking_uri(client.tracking_uri):
            info = mlflow.pytorch.log_model(module, model_id=logged.model_id, run_id=run_id, step=step, **options)
    client.set_tag(run_id, TAG_MODEL_ID, info.model_id)
    for other in linked_runs:
        link_model(client, other, info.model_id, step=step)
    return info.model_id


def link_model(client: MlflowClient, run_id: str, model_id: str, *, step: int) -> None:
    """A logged model listed as an output of another run (a study's parent), and named in its tags."""
    client.log_outputs(run_id, models=[LoggedModelOutput(model_id, step=step)])
    client.set_tag(run_id, TAG_MODEL_ID, model_id)


def delete_model(client: MlflowClient, run_id: str, model_id: str) -> None:
    """A logged model taken back: marked deleted (its files go with `mlflow gc`) and no longer named by its run."""
    client.delete_logged_model(model_id)
    client.delete_tag(run_id, TAG_MODEL_ID)


def _as_served(model: torch.nn.Module, example: np.ndarray) -> tuple[Logits, dict[str, Any]]:
    """The module MLflow saves (logits only, eval mode) and the options it is saved with."""
    module = Logits(model.eval())
    # two inputs (the batch dimension stays free): images float32, a text dataset's token ids int64
    kind = np.int64 if np.issubdtype(example.dtype, np.integer) else np.float32
    example = np.ascontiguousarray(example[:2], dtype=kind)
    with torch.no_grad():
        output = module(torch.from_numpy(example)).numpy()
    return module, {
        "signature": infer_signature(example, output),
        "input_example": example,
        "serialization_format": "pt2",
        # stated, not inferred: inference loads the model in a subprocess (seconds per model)
        "pip_requirements": [f"torch=={torch.__version__.split('+')[0]}", f"numpy=={np.__version__}"],
    }


def warm_up() -> None:
    """Saves a one-layer model as `log_model` saves one, to a temporary directory: what a process's first export
    loads and initialises once (torch._dynamo, MLflow's map of installed packages; ~3 s) is then in place."""
    module, options = _as_served(_Pair(torch.nn.Linear(4, 2)), np.zeros((2, 4), dtype=np.float32))
    with _quiet_mlflow(), tempfile.TemporaryDirectory() as directory:
        mlflow.pytorch.save_model(module, str(Path(directory) / "model"), **options)


@contextlib.contextmanager
def _quiet_mlflow() -> Iterator[None]:
    """MLflow prints table-creation and environment notes on every call: errors only, meanwhile."""
    quiet = logging.getLogger("mlflow")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        yield
    finally:
        quiet.setLevel(level)


class _Pair(torch.nn.Module):
    """A layer that answers as our models do: (logits, representation)."""

    def __init__(self, layer: torch.nn.Module) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.layer(x), x


def load_model(tracking_uri: str, model_id: str) -> torch.nn.Module:
    """A logged model back, as `mlflow.pytorch.load_model` gives it to anyone."""
    with _use_tracking_uri(tracking_uri):
        return mlflow.pytorch.load_model(f"models:/{model_id}")
