"""The live progress of a real small study with --verbose: every trial start and every round is printed.
(Hand-built events and the quiet study: tests/cli/test_progress.py.)"""

from __future__ import annotations

import yaml

from tests.support import tiny_space
from tests.support.progress_lines import ENDED, PER_ROUND, RAN_BOTH_ROUNDS


def _tiny_study(tmp_path, capsys, *extra: str) -> str:
    from raytune_fl.cli import main

    data = tiny_space("progress", rounds=2, resources={"actors": 0})
    data["tune"]["num_samples"] = 2
    tmp_path.mkdir(exist_ok=True)
    space = tmp_path / "progress.yaml"
    space.write_text(yaml.safe_dump(data))
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    capsys.readouterr()
    args = ["--space", str(space), "--storage", str(tmp_path / "ray"), "--mlflow-uri", uri, "--variants", "full"]
    assert main([*args, *extra]) == 0
    return capsys.readouterr().out


def test_with_verbose_a_real_study_prints_every_start_and_round(ray_cluster, tmp_path, capsys):
    printed = _tiny_study(tmp_path, capsys, "--verbose")
    print(printed)
    assert "[full] trial 1/2 started: " in printed and "[full] trial 2/2 started: " in printed
    ended = ENDED.findall(printed)
    assert len(PER_ROUND.findall(printed)) == sum(2 if how in RAN_BOTH_ROUNDS else 1 for _, how in ended)
    assert len(ended) == 2 and any(line.startswith("[full] done: 2/2 trials ended") for line in printed.splitlines())
