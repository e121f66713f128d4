"""A federation stopped after a round, resumed from its checkpoint on disk (engine/checkpoint.py), against the
same run uninterrupted: what every stateful method's checkpoint test runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from raytune_fl.config import ExperimentConfig
from raytune_fl.engine.checkpoint import load_state, save_state
from raytune_fl.engine.federation import Federation


class _Stop(Exception):
    pass


def small_federation(rounds: int = 2, participation: float = 1.0) -> ExperimentConfig:
    """Digits over 3 clients, in process, no costly diagnostics: the federation every checkpoint test resumes."""
    return ExperimentConfig(
        dataset="digits",
        partition={"kind": "dirichlet", "alpha": 0.5, "clients": 3, "min_size": 20},
        rounds=rounds,
        participation=participation,
        batch_size=32,
        resources={"actors": 0},
        diagnostics={"every": 0},
    )


def untimed(rows: list[dict]) -> list[dict]:
    """Round metrics without wall times (`*_s`): what must repeat exactly."""
    return [{k: v for k, v in row.items() if not k.endswith("_s")} for row in rows]


def straight_and_resumed(
    experiment: ExperimentConfig, method: str, params: dict[str, Any], directory: Path, stop_after: int = 1
) -> tuple[list[dict], list[dict], Federation]:
    """(every round of an uninterrupted run, the rounds after `stop_after` of a run resumed from a checkpoint
    written then, the resumed federation)."""
    straight: list[dict] = []
    Federation(experiment, method, params).run(straight.append)
    federation = Federation(experiment, method, params)

    def stop(metrics: dict) -> None:
        if metrics["round"] == stop_after:
            save_state(federation.state_dict(), directory)
            raise _Stop

    with pytest.raises(_Stop):
        federation.run(stop)
    resumed = Federation(experiment, method, params)
    resumed.load_state_dict(load_state(directory))
    rest: list[dict] = []
    resumed.run(rest.append)
    return straight, rest, resumed


def resumable_experiment(**overrides) -> ExperimentConfig:
    """Digits over 4 clients, 4 rounds in process, diagnostics every 2: the engine's resume and schedule tests."""
    settings = {
        "dataset": "digits",
        "partition": {"kind": "dirichlet", "alpha": 0.5, "clients": 4, "min_size": 20},
        "rounds": 4,
        "batch_size": 32,
        "resources": {"actors": 0},
        "diagnostics": {"every": 2},
        **overrides,
    }
    return ExperimentConfig(**settings)
