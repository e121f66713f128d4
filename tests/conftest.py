"""Shared fixtures. Ray: one private local cluster per test session; never `ray stop`."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def ray_cluster():
    import ray

    if not ray.is_initialized():
        # num_gpus=0 on a GPU machine too: tests that ask for a GPU expect this cluster to have none
        ray.init(address="local", num_cpus=2, num_gpus=0, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()  # ends only the private cluster this session started


def command_lines() -> list[str]:
    """Every live process's command line (from /proc: no psutil needed)."""
    lines = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                lines.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
            except OSError:  # exited meanwhile
                continue
    return lines


def tiny_space(name: str = "tiny", **base_overrides) -> dict:
    """A search space small enough to run end to end in seconds: digits, 3 clients, 3 rounds."""
    base = {
        "dataset": "digits",
        "partition": {"kind": "dirichlet", "alpha": 0.5, "clients": 3, "min_size": 20, "seed": 0},
        "rounds": 3,
        "batch_size": 32,
        "resources": {"actors": 2, "cpus_per_actor": 1},
        **base_overrides,
    }
    return {
        "name": name,
        "base": base,
        "variants": {
            "full": {
                "method": "univarfl",
                "search": {"mu": {"loguniform": [0.01, 1.0]}, "lambda": {"uniform": [0.5, 3.0]}},
            },
            "fedavg": {"method": "fedavg"},
        },
        "tune": {"num_samples": 3, "max_concurrent": 1, "scheduler": {"asha": {"grace_period": 1}}, "seed": 0},
    }


def run_study(tmp_path: Path, data: dict) -> tuple:
    """`data` (a search space) through the real `tune.py` main into a fresh SQLite store: (client, its runs)."""
    import yaml
    from mlflow.tracking import MlflowClient

    from raytune_fl.cli import main

    space = tmp_path / f"{data['name']}.yaml"
    space.write_text(yaml.safe_dump(data))
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    assert main(["--space", str(space), "--storage", str(tmp_path / "ray"), "--mlflow-uri", uri]) == 0
    client = MlflowClient(uri)
    return client, client.search_runs([client.get_experiment_by_name(data["name"]).experiment_id])


DELETE = object()  # as a value in changed_space(): remove that key


def changed_space(*changes: tuple[str, object]) -> dict:
    """tiny_space() with dotted-path changes applied (missing sections are created; DELETE removes a key)."""
    data = tiny_space()
    for path, value in changes:
        node = data
        *parents, leaf = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        if value is DELETE:
            del node[leaf]
        else:
            node[leaf] = value
    return data


@pytest.fixture(scope="session")
def ablation_store(ray_cluster, tmp_path_factory):
    """A real tuned study and ablation in one MLflow store, made by the real CLIs (shared by the ablation and
    dashboard tests): `full` tuned with two trials, `fedavg` left untuned (so the ablation takes its
    configuration from the YAML), a dashboard of that store, then 2 variants x 2 seeds x alpha in {0.5, 1.0}
    (which builds the dashboard again, with the ablation)."""
    import contextlib
    import io
    from types import SimpleNamespace

    import yaml

    from raytune_fl.cli import main as tune
    from raytune_fl.cli.ablate import main as ablate

    root = tmp_path_factory.mktemp("ablation_store")
    space = tiny_space("ablation_tiny", rounds=2, resources={"actors": 0})
    space["tune"]["max_concurrent"] = 2  # in-process trials take one CPU each
    path = root / "ablation_tiny.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False))  # the file's variant order is the table's row order
    uri = f"sqlite:///{root / 'mlflow.db'}"
    common = ["--space", str(path), "--mlflow-uri", uri, "--storage", str(root / "ray_results")]
    tuned = io.StringIO()
    with contextlib.redirect_stdout(tuned):
        code = tune([*common, "--variants", "full", "--num-samples", "2"])
    print(tuned.getvalue())
    assert code == 0
    # the dashboard of a store with studies only (its fallbacks), before the ablation adds to the store
    from raytune_fl.config import load_space
    from raytune_fl.report.dashboard import build_dashboard

    printed_by_dashboard: list[str] = []
    tune_only = build_dashboard(
        uri, load_space(path), root / "tune_only" / "dashboard.html", echo=printed_by_dashboard.append
    )
    out = root / "reports"
    argv = [*common, "--seeds", "2", "--grid", "alpha=0.5,1.0", "--out", str(out)]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = ablate(argv)
    print(printed.getvalue())
    assert code == 0
    return SimpleNamespace(
        root=root,
        space_path=path,
        space_name="ablation_tiny",
        uri=uri,
        out=out,
        argv=argv,
        output=printed.getvalue(),
        tune_output=tuned.getvalue(),  # tune.py's stdout (not a terminal)
        tune_only=tune_only,
        dashboard_output=printed_by_dashboard,
    )
