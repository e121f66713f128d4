"""Bytes uploaded per round (engine/traffic.py), counted by hand on a model small enough to count.

TinyNet on digits (1 x 8 x 8 images, 10 classes): Linear(64, 4) has 64*4 + 4 = 260 float32 parameters, BatchNorm1d(4)
has weight, bias, running_mean and running_var (16 float32) and num_batches_tracked (one int64), the classifier
Linear(4, 10) has 4*10 + 10 = 50. A client's delta is the 326 float32 entries (1304 bytes), its buffers the int64
counter (8 bytes): 1312 bytes a client under FedAvg.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from torch import nn

from raytune_fl.config import ExperimentConfig
from raytune_fl.engine.federation import Federation
from raytune_fl.engine.traffic import payload_bytes, upload_bytes, upload_metrics
from raytune_fl.metrics import CLIENTS, UPLOAD_BYTES, UPLOAD_BYTES_PER_CLIENT
from raytune_fl.types import ClientUpdate

MODEL = "plug_traffic_net"
DELTA_BYTES = (260 + 16 + 50) * 4
BUFFER_BYTES = 8
FEDAVG_CLIENT = DELTA_BYTES + BUFFER_BYTES  # 1312
TRAINABLE = 260 + 8 + 50  # parameters (BatchNorm's running statistics are buffers, not parameters)


class TinyNet(nn.Module):
    def __init__(self, in_channels: int, num_classes: int, image_size: tuple[int, int]) -> None:
        super().__init__()
        self.body = nn.Linear(in_channels * image_size[0] * image_size[1], 4)
        self.norm = nn.BatchNorm1d(4)
        self.classifier = nn.Linear(4, num_classes)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = torch.relu(self.norm(self.body(x.flatten(1))))
        return self.classifier(z), z


@pytest.fixture
def tiny_model(plugin_dir):
    """TinyNet registered for the test only (plugin_dir restores the registries afterwards)."""
    import raytune_fl

    raytune_fl.register_model(MODEL, TinyNet)
    return MODEL


def _experiment(**overrides) -> ExperimentConfig:
    return ExperimentConfig.model_validate(
        {
            "dataset": "digits",
            "model": MODEL,
            "partition": {"kind": "dirichlet", "alpha": 0.5, "clients": 3, "min_size": 20, "seed": 0},
            "rounds": 1,
            "batch_size": 32,
            "resources": {"actors": 0},
            "diagnostics": {"every": 0},
            **overrides,
        }
    )


def _rounds(experiment: ExperimentConfig, method: str, params: dict | None = None) -> list[dict]:
    rows: list[dict] = []
    Federation(experiment, method, params or {}).run(rows.append)
    return rows


@dataclasses.dataclass
class _Report:  # the shape of FedPAC's PrototypeReport: a float beside arrays
    v: float
    h: np.ndarray
    counts: np.ndarray


def test_payload_bytes_counts_every_number_it_can_see():
    assert payload_bytes(np.zeros(3, np.float32)) == 12
    assert payload_bytes(np.zeros((2, 5), np.float64)) == 80
    assert payload_bytes(np.float64(1.0)) == 8 and payload_bytes(np.int32(1)) == 4
    assert payload_bytes(0.5) == 8 and payload_bytes(3) == 8 and payload_bytes(True) == 1
    assert payload_bytes(torch.zeros(4, dtype=torch.float16)) == 8
    assert payload_bytes({"a": np.zeros(2, np.int64), "b": [np.zeros(1, np.float32), 1.0]}) == 16 + 4 + 8
    assert payload_bytes(_Report(0.1, np.zeros((2, 3)), np.zeros(2, np.int64))) == 8 + 48 + 16
    assert payload_bytes("ab") == 2 and payload_bytes(b"abc") == 3
    assert payload_bytes(None) == 0 and payload_bytes(object()) == 0


def test_an_update_counts_delta_buffers_and_extras_but_not_state():
    update = ClientUpdate(
        client_id=0,
        num_samples=10,
        num_steps=1,
        delta={"w": np.zeros((3, 2), np.float32), "b": np.zeros(2, np.float32)},  # 24 + 8
        buffers={"n": np.zeros((), np.int64)},  # 8
        metrics={"loss": 1.0},
        state={"kept": np.zeros(1000, np.float64)},  # stays with the client: not counted
        extras={"method": {"w": np.zeros((3, 2), np.float64)}},  # 48
    )
    assert upload_bytes(update) == 24 + 8 + 8 + 48
    other = dataclasses.replace(update, client_id=1, extras={})
    assert upload_metrics([update, other]) == {UPLOAD_BYTES: 88 + 40, UPLOAD_BYTES_PER_CLIENT: (88 + 40) / 2}
    assert upload_metrics([]) == {UPLOAD_BYTES: 0}  # nobody reported: no mean over no client


def test_fedavg_uploads_its_parameters_and_buffers(tiny_model):
    rows = _rounds(_experiment(rounds=2), "fedavg")
    assert [(row[UPLOAD_BYTES], row[UPLOAD_BYTES_PER_CLIENT]) for row in rows] == [(3 * 1312, 1312.0)] * 2
    assert FEDAVG_CLIENT == 1312


def test_batched_clients_upload_what_one_at_a_time_do(tiny_model):
    """resources.client_batch: the vectorised path (engine/batched.py) yields updates of the same arrays."""
    rows = _rounds(_experiment(resources={"actors": 0, "client_batch": 3}), "fedavg")
    assert [row[UPLOAD_BYTES] for row in rows] == [3 * FEDAVG_CLIENT]


def test_only_the_clients_that_reported_count(tiny_model):
    rows = _rounds(_experiment(rounds=4, participation=0.7, system={"dropout": 0.4}), "fedavg")
    assert {row[CLIENTS] for row in rows} == {0, 1, 2}, "the dropout thins rounds to one client and to none"
    for row in rows:
        assert row[UPLOAD_BYTES] == row[CLIENTS] * FEDAVG_CLIENT
        assert row.get(UPLOAD_BYTES_PER_CLIENT) == (FEDAVG_CLIENT if row[CLIENTS] else None)


def test_scaffold_also_uploads_its_control_variate_change(tiny_model):
    """SCAFFOLD's client sends c_i+ - c_i (extras), one float32 per trainable parameter; c_i itself stays (state)."""
    rows = _rounds(_experiment(), "scaffold")
    per_client = FEDAVG_CLIENT + TRAINABLE * 4  # 1312 + 1272
    assert [row[UPLOAD_BYTES] for row in rows] == [3 * per_client]


def test_qffl_also_uploads_its_loss(tiny_model):
    rows = _rounds(_experiment(), "qffl")
    assert rows[0][UPLOAD_BYTES] == 3 * (FEDAVG_CLIENT + 8)  # one float64: the global model's loss on its data


def test_fedpac_also_uploads_its_class_statistics(tiny_model):
    """V (a float64), h and the class means (10 classes x 4 features, float64 each), the class counts (10 int64)."""
    rows = _rounds(_experiment(), "fedpac")
    assert rows[0][UPLOAD_BYTES] == 3 * (FEDAVG_CLIENT + 8 + 320 + 320 + 80)


def test_fedbuff_counts_the_buffered_updates_of_each_round(tiny_model):
    rows = _rounds(_experiment(rounds=3, system={"speed_sigma": 1.0}), "fedbuff", {"buffer_size": 2})
    assert [(row[CLIENTS], row[UPLOAD_BYTES]) for row in rows] == [(2, 2 * FEDAVG_CLIENT)] * 3
