"""`scripts/reproduce.py NAME`: every paper table's space file is sound; bad options fail before Ray; each table
end to end (shrunken) is tests/system/test_reproduce.py."""

from __future__ import annotations

import pytest

from raytune_fl.cli import reproduce
from raytune_fl.config import load_space
from raytune_fl.methods import METHODS
from tests.support import REPO


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
    assert reproduce._alphas(paper.alphas) and paper.seeds >= 1 and paper.partition_seeds >= 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["feduv_table4", "--alphas", "0.1,x"], "--alphas: comma-separated positive numbers"),
        (["feduv_table4", "--alphas", "0.1,-1"], "--alphas: comma-separated positive numbers"),
        (["feduv_table4", "--seeds", "0"], "--seeds: at least 1 (got 0)"),
        (["univarfl_paper", "--partition-seeds", "0"], "--partition-seeds: at least 1 (got 0)"),
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
