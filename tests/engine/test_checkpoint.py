"""Checkpoint and resume: a federation restored from its checkpoint continues exactly as if never stopped;
a study whose driver is killed (SIGKILL of its whole process group) resumes with `tune.py --resume`."""

from __future__ import annotations

import os
import pickle

import pytest
import torch

from raytune_fl.engine.checkpoint import STATE_FILE, load_state, save_state
from raytune_fl.engine.federation import Federation
from tests.support import tiny_space
from tests.support.resume_check import resumable_experiment


class _Crash(Exception):
    pass


def _untimed(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if not k.endswith("_s")} for row in rows]


@pytest.mark.parametrize(
    ("method", "params", "system"),
    [
        ("scaffold", {}, {}),  # per-client and server state
        ("fedavgm", {}, {"dropout": 0.3}),  # server momentum; dropouts
        ("moon", {}, {"local_steps": [1, 3]}),  # a previous model per client; step budgets
        ("fedbuff", {"buffer_size": 2}, {"speed_sigma": 1.0}),  # clients in flight and a buffer
    ],
)
def test_a_restored_federation_continues_exactly(tmp_path, method, params, system):
    experiment = resumable_experiment(system=system, participation=0.75)
    straight: list[dict] = []
    Federation(experiment, method, params).run(straight.append)

    def crash_after_round_2(metrics: dict) -> None:
        if metrics["round"] == 2:
            save_state(federation.state_dict(), tmp_path)  # what the trainable checkpoints with the report
            raise _Crash

    federation = Federation(experiment, method, params)
    with pytest.raises(_Crash):
        federation.run(crash_after_round_2)
    resumed = Federation(experiment, method, params)
    resumed.load_state_dict(load_state(tmp_path))
    rest: list[dict] = []
    resumed.run(rest.append)
    assert [r["round"] for r in rest] == [3, 4]
    assert _untimed(rest) == _untimed(straight[2:])


def test_checkpoints_load_with_weights_only(tmp_path):
    class Payload:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    save_state({"round": 1, "weights": {}}, tmp_path)
    assert load_state(tmp_path)["round"] == 1
    torch.save({"round": Payload()}, tmp_path / STATE_FILE)
    with pytest.raises(pickle.UnpicklingError):
        load_state(tmp_path)


def test_a_new_study_keeps_the_previous_study_record(tmp_path):
    from raytune_fl.config import parse_space
    from raytune_fl.tune.manifest import StudyManifest

    space = parse_space(tiny_space("kept"))
    first = StudyManifest.start(tmp_path, space, "sqlite:///x.db")
    first.variants["fedavg"] = {"experiment_path": "p", "parent_run_id": "r", "outcome": None}
    first.save()
    StudyManifest.start(tmp_path, space, "sqlite:///x.db")
    kept = sorted(tmp_path.glob("kept.study.*.json"))
    assert len(kept) == 1 and '"parent_run_id": "r"' in kept[0].read_text()
    assert StudyManifest.load(tmp_path, space, "sqlite:///x.db").variants == {}
