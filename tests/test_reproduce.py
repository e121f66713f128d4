"""`scripts/reproduce.py NAME`: every paper table's space file is sound; bad options fail before Ray; each table
runs end to end with a shrunken round count (slow tier) and writes its results page."""

from __future__ import annotations

import pandas as pd
import pytest

from raytune_fl.cli import reproduce
from raytune_fl.config import load_space
from raytune_fl.methods import METHODS
from tools.dashboard_png import screenshot as dashboard_png

from .conftest import REPO


@pytest.mark.parametrize("name", sorted(reproduce.PAPERS))
def test_every_paper_table_names_a_space_file_that_loads_and_holds_its_reference(name):
    paper = reproduce.PAPERS[name]
    path = paper.space_file(name)
    assert path.parent == REPO / "search_spaces" / "papers" and path.exists()
    space = load_space(path)
    assert paper.reference in space.variants and not space.variants[paper.reference].search
    assert space.base.partition.val_fraction > 0  # tuning selects on validation, never on the test set
    assert space.tune.metric == "val_acc"
    for variant in space.variants.values():
        assert variant.method in METHODS
    assert [v for v in space.variants.values() if v.search], "nothing to tune"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["feduv_table4", "--alphas", "0.1,x"], "--alphas: comma-separated positive numbers"),
        (["feduv_table4", "--alphas", "0.1,-1"], "--alphas: comma-separated positive numbers"),
        (["feduv_table4", "--seeds", "0"], "--seeds: at least 1 (got 0)"),
    ],
)
def test_bad_options_are_refused_by_name_before_ray_starts(argv, message, capsys, monkeypatch, tmp_path):
    from raytune_fl.runtime import cluster

    monkeypatch.setattr(cluster, "start_ray", lambda address: pytest.fail("Ray started"))
    assert reproduce.main([*argv, "--work", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err


def test_an_unknown_table_is_refused_with_the_known_names(capsys):
    with pytest.raises(SystemExit) as exit_:
        reproduce.main(["feduv_table9"])
    assert exit_.value.code == 2
    assert "feduv_table4" in capsys.readouterr().err


SHRUNKEN = ["--rounds=1", "--num-samples=1", "--seeds=2", "--alphas=0.1,0.5", "--set=base.resources.actors=0"]


@pytest.mark.slow
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
