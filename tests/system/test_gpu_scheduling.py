"""Fractional-GPU scheduling, checked on a CPU machine: Ray nodes that declare GPUs they do not have
(`ray start --num-gpus N`), trials whose actors reserve GPU fractions, and `resources.device: cpu` so that the
compute stays on the CPU. What Ray assigned is read back from the per-client records in `client_rounds.parquet`."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml
from mlflow.tracking import MlflowClient

from tests.support import REPO, tiny_space
from tests.support.ray_nodes import Node, start_cli, start_node, stop_node

RUN_S = 240  # one tiny study or ablation on a joined cluster (4 actors start: each imports torch)


def _space(path: Path, name: str, **resources) -> Path:
    data = tiny_space(name, rounds=2)
    data["base"]["partition"]["clients"] = 4  # one client per actor: every actor trains every round
    data["base"]["resources"] = {"cpus_per_actor": 1, "device": "cpu", **resources}
    del data["variants"]["full"]
    data["tune"]["max_concurrent"] = 2
    file = path / f"{name}.yaml"
    file.write_text(yaml.safe_dump(data))
    return file


def _run(head: Node, script: str, space: Path, tmp: Path, name: str, *extra: str) -> MlflowClient:
    uri = f"sqlite:///{tmp / name}.db"
    args = ["--space", str(space), "--address", head.address, "--storage", str(tmp / f"{name}-results")]
    args += ["--mlflow-uri", uri, *extra]
    run = start_cli(REPO / "scripts" / script, args, tmp, name, head.env, REPO)
    rc, out, _, _ = run.finish(RUN_S)
    assert rc == 0, f"{script} exited with {rc}" + run.context() + "\nthe head's logs:\n" + head.ray_logs()
    return MlflowClient(uri)


def _children(client: MlflowClient) -> list:
    experiment = client.search_experiments(filter_string="name != 'Default'")[0]
    runs = client.search_runs([experiment.experiment_id])
    return [r for r in runs if "mlflow.parentRunId" in r.data.tags]


def _client_rounds(client: MlflowClient, run) -> pd.DataFrame:
    return pd.read_parquet(client.download_artifacts(run.info.run_id, "client_rounds.parquet"))


def _history(client: MlflowClient, run) -> dict[str, list[float]]:
    return {k: [m.value for m in client.get_metric_history(run.info.run_id, k)] for k in ("val_acc", "val_loss")}


@pytest.fixture(scope="module")
def one_gpu_node():
    node = start_node(num_cpus=5, num_gpus=1)  # a trial: 4 actors x 1 CPU + the driver bundle (0 CPU)
    yield node
    stop_node(node)


@pytest.fixture(scope="module")
def two_gpu_node():
    node = start_node(num_cpus=4, num_gpus=2)  # two trials at once: 2 actors x 1 CPU each
    yield node
    stop_node(node)


def test_four_quarter_gpu_actors_share_gpu_0_in_the_trial_placement_group(one_gpu_node, tmp_path):
    # four actors and the driver (its evaluation share, driver_gpus unset) at a fifth of the one GPU each
    space = _space(tmp_path, "quarter", actors=4, gpus_per_actor=0.2)
    (gpu_run,) = _children(client := _run(one_gpu_node, "tune.py", space, tmp_path, "quarter"))
    records = _client_rounds(client, gpu_run)
    assert list(records["round"].unique()) == [1, 2] and (records["status"] == "trained").all()
    for _, rows in records.groupby("round"):
        assert rows["actor"].nunique() == 4, rows  # each of the four actors trained a client
        assert rows["placement_group"].nunique() == 1 and rows["placement_group"].iloc[0] != ""
    assert set(records["gpus"]) == {"0"}  # the fifths of the node's one GPU
    assert set(records["device"]) == {"cpu"}  # device: cpu keeps the compute on this machine's CPU
    assert records["node"].nunique() == 1 and records["node"].iloc[0] != ""
    # the same trial with no GPU reserved learns exactly the same (device: cpu, one thread per actor)
    cpu_space = _space(tmp_path, "quarter_cpu", actors=4, gpus_per_actor=0)
    (cpu_run,) = _children(cpu_client := _run(one_gpu_node, "tune.py", cpu_space, tmp_path, "quarter_cpu"))
    assert set(_client_rounds(cpu_client, cpu_run)["gpus"]) == {""}
    assert _history(cpu_client, cpu_run) == _history(client, gpu_run)


def test_two_concurrent_trials_get_disjoint_gpus(two_gpu_node, tmp_path):
    # 1 GPU per trial (2 actors and the driver, a third each), 2 trials at once
    space = _space(tmp_path, "pair", actors=2, gpus_per_actor=0.3333)
    client = _run(
        two_gpu_node, "ablate.py", space, tmp_path, "pair", "--seeds", "2", "--grid", "rho=1.0", "--no-dashboard",
        "--out", str(tmp_path / "pair-report"),
    )  # fmt: skip
    cells = _children(client)
    assert len(cells) == 2 and all(r.info.status == "FINISHED" for r in cells)
    first, second = sorted(cells, key=lambda r: r.info.start_time)
    assert second.info.start_time < first.info.end_time, "the two trials did not run at the same time"
    gpus = [set(_client_rounds(client, r)["gpus"]) for r in (first, second)]
    assert all(len(g) == 1 for g in gpus), gpus  # each trial's thirds pack onto one GPU
    assert gpus[0].isdisjoint(gpus[1]) and gpus[0] | gpus[1] == {"0", "1"}, gpus
