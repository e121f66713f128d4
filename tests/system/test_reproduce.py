"""`scripts/reproduce.py NAME`: each paper table runs end to end with a shrunken round count and writes its results
page. (Space files and bad options: tests/cli/test_reproduce.py.)"""

from __future__ import annotations

import pandas as pd
import pytest

from raytune_fl.cli import reproduce
from raytune_fl.config import load_space
from tools.dashboard_png import screenshot as dashboard_png

SHRUNKEN = ["--rounds=1", "--num-samples=1", "--seeds=2", "--alphas=0.1,0.5", "--set=base.resources.actors=0"]


@pytest.mark.parametrize("name", sorted(reproduce.PAPERS))
def test_each_table_reproduces_end_to_end_with_a_shrunken_round_count(name, ray_cluster, tmp_path, capsys):
    space = load_space(reproduce.PAPERS[name].space_file(name))
    screenshot = [] if name == "fedld_table2" else ["--no-screenshot"]  # one screenshot is enough to check it
    out, work = tmp_path / "results", tmp_path / "work"
    code = reproduce.main([name, *SHRUNKEN, *screenshot, "--out", str(out), "--work", str(work)], dashboard_png)
    assert code == 0, capsys.readouterr().err[-3000:]
    runs = pd.read_csv(out / name / "runs.csv")
    assert len(runs) == len(space.variants) * 2 * 2  # variants x seeds x alphas
    assert (runs["status"] == "finished").all() and (runs["rounds_completed"] == 1).all()
    assert set(runs["setting"]) == {"alpha=0.1", "alpha=0.5"}
    page = (out / f"{name}.md").read_text()
    assert "| variant | alpha=0.1 | alpha=0.5 |" in page
    searched = [v for v, spec in space.variants.items() if spec.search]
    for variant in space.variants:
        assert f"\n| {variant} | " in page  # a row in the table
    for variant in searched:  # its tuned values, read back from its study in MLflow
        line = next(s for s in page.splitlines() if s.startswith(f"| {variant} | {space.variants[variant].method} |"))
        assert "nothing searched" not in line and all(f"{k}=" in line for k in space.variants[variant].search)
    assert f"| variant − {reproduce.PAPERS[name].reference} |" in page
    assert "python scripts/tune.py" in page and "python scripts/ablate.py" in page
    assert "cores" in page and "torch" in page  # the machine
    if not screenshot:
        assert (out / name / "dashboard.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({name}/dashboard.png)" in page
