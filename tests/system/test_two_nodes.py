"""Two Ray nodes on one machine (a head and a worker joined to it, each its own `ray start` with its own CPUs,
temp dir and a custom resource): an ablation's trials land on both nodes, and an ablation that loses the worker
node mid-run still completes, its dead trials restarted by Tune from their checkpoints on the head."""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from mlflow.tracking import MlflowClient

from raytune_fl.tracking.schema import RAN_EVERY_ROUND
from tests.support import REPO, tiny_space
from tests.support.ray_nodes import CliRun, Node, gcs, kill_node, start_cli, start_node, stop_node

ABLATION_S = 300  # 4 cells of a tiny space, 2 at a time (one per node), on 2 cores
LOSS_ABLATION_S = 480  # the same with a node lost: the worker's trials wait for the head, then redo rounds


@pytest.fixture(scope="module")
def cluster():
    head = start_node(num_cpus=2, resources={"head_node": 1})
    try:
        worker = start_node(num_cpus=2, resources={"worker_node": 1}, head=head)
        deadline = time.time() + 30
        while len([n for n in gcs(head)["nodes"] if n["alive"]]) < 2:
            assert time.time() < deadline, f"the worker node did not register:\n{worker.log_tail()}"
            time.sleep(0.5)
        yield head, worker
    finally:
        stop_node(head)  # and its worker, if it is still alive


def _space(tmp: Path, name: str, rounds: int, **base) -> Path:
    data = tiny_space(name, rounds=rounds, **base)
    # a trial takes 2 CPUs (a driver bundle and one actor): one trial per 2-CPU node at a time
    data["base"]["resources"] = {"actors": 1, "cpus_per_actor": 1, "driver_cpus": 1, **base.get("resources", {})}
    data["tune"]["max_concurrent"] = 2
    file = tmp / f"{name}.yaml"
    file.write_text(yaml.safe_dump(data))
    return file


def _ablate(head: Node, space: Path, tmp: Path, name: str) -> tuple[CliRun, str]:
    uri = f"sqlite:///{tmp / name}.db"
    args = ["--space", str(space), "--address", head.address, "--storage", str(tmp / f"{name}-results")]
    args += ["--mlflow-uri", uri, "--seeds", "2", "--grid", "rho=1.0", "--out", str(tmp / name), "--no-dashboard"]
    args += ["--verbose"]  # a line per cell round: the loss test waits for two cells' first rounds
    return start_cli(REPO / "scripts" / "ablate.py", args, tmp, name, head.env, REPO), uri


def _cells(uri: str, experiment: str) -> list:
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    return [r for r in runs if r.data.tags.get("stage") == "ablation" and r.data.tags.get("role") != "parent"]


def _nodes_used(uri: str, cells: list) -> set[str]:
    client = MlflowClient(uri)
    frames = [pd.read_parquet(client.download_artifacts(r.info.run_id, "client_rounds.parquet")) for r in cells]
    return set(pd.concat(frames)["node"])


def _check_complete(uri: str, experiment: str, tmp: Path, name: str) -> list:
    """Every cell has one finished run, no run is left RUNNING, the table has every cell."""
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    assert [r.info.run_name for r in runs if r.info.status == "RUNNING"] == []
    cells = _cells(uri, experiment)
    finished = [r for r in cells if r.data.tags.get("trial_status") in RAN_EVERY_ROUND]  # collapsed ran every round too
    assert len({r.data.tags["cell"] for r in finished}) == 4, [(r.data.tags, r.info.status) for r in cells]
    table = (tmp / name / "ablation_table.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith(("| full |", "| fedavg |"))]
    assert len(rows) == 2 and all("±" in row and "/" not in row for row in rows), table  # no (n/runs): all ran
    results = pd.read_parquet(tmp / name / "ablation_results.parquet")
    assert len(results) == 4 and results["status"].isin(RAN_EVERY_ROUND).all(), results
    return finished


def test_an_ablation_spreads_its_trials_over_both_nodes(cluster, tmp_path):
    head, _ = cluster
    run, uri = _ablate(head, _space(tmp_path, "spread", rounds=2), tmp_path, "spread")
    rc, out, _, _ = run.finish(ABLATION_S)
    assert rc == 0, f"ablate.py exited with {rc}" + run.context()
    finished = _check_complete(uri, "spread", tmp_path, "spread")
    alive = {n["id"] for n in gcs(head)["nodes"] if n["alive"]}
    assert _nodes_used(uri, finished) == alive and len(alive) == 2  # the actors ran on the head and the worker


def test_an_ablation_survives_losing_a_node(cluster, tmp_path):
    head, worker = cluster
    # longer trials, so the worker dies mid-trial; a replaced actor that cannot be placed gives up in 60 s
    space = _space(tmp_path, "loss", rounds=6, resources={"round_timeout_s": 60})
    run, uri = _ablate(head, space, tmp_path, "loss")
    deadline = time.time() + ABLATION_S
    while True:  # both nodes busy: two trials have reported a round (one trial per node)
        started = {line.split(" round ")[0] for line in run.output()[0].splitlines() if " round 1/6 " in line}
        if len(started) >= 2:
            break
        assert run.process.poll() is None and time.time() < deadline, "never two trials at once" + run.context()
        time.sleep(0.5)
    kill_node(worker)
    rc, out, _, _ = run.finish(LOSS_ABLATION_S)
    assert rc == 0, f"ablate.py exited with {rc}" + run.context()
    finished = _check_complete(uri, "loss", tmp_path, "loss")
    restarts = sum(int(r.data.tags.get("trial_restarts", 0)) for r in _cells(uri, "loss"))
    print(f"trials restarted by Tune after the node loss: {restarts}")
    assert restarts >= 1, "no trial was restarted: did the worker die with no trial on it?" + run.context()
    assert len(_nodes_used(uri, finished)) >= 1
