"""What many tests share and no test is: the repository's root, a tiny search space, the real tune.py on it."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def git_output(*args: str, timeout: float = 60) -> str:
    """`git <args>` in the repository, its stdout; the calling test is skipped where git or the checkout is missing."""
    import subprocess

    import pytest

    try:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as error:
        pytest.skip(f"no git: {error}")
    if done.returncode != 0:
        pytest.skip(f"git {args[0]}: {done.stderr.strip()}")
    return done.stdout


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


def ablate_argv(tmp_path: Path) -> list[str]:
    """ablate.py's arguments for tiny_space written under tmp_path, its MLflow store and output beside it."""
    import yaml

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny_space()))
    return ["--space", str(path), "--mlflow-uri", f"sqlite:///{tmp_path / 'm.db'}", "--out", str(tmp_path / "o")]


def band_curves():
    """Learning curves of three runs for the dashboard's band: c stopped after round 1."""
    import pandas as pd

    return pd.DataFrame(
        {
            "run_id": ["a", "a", "b", "b", "c"],
            "round": [1, 2, 1, 2, 1],
            "test_acc": [0.2, 0.5, 0.4, 0.7, 0.3],
            "elapsed_s": [10.0, 12.0, 20.0, 23.0, 30.0],
        }
    )
