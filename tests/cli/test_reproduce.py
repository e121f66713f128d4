"""`scripts/reproduce.py NAME`: every paper table's space file is sound; bad options fail before Ray; each table
end to end (shrunken) is tests/system/test_reproduce.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from raytune_fl.cli import reproduce
from raytune_fl.config import load_space
from raytune_fl.methods import METHODS
from raytune_fl.metrics import PERSONAL_VAL_ACC, TEST_ACC
from tests.support import REPO


@pytest.mark.parametrize("name", sorted(reproduce.PAPERS))
def test_every_paper_table_names_a_space_file_that_loads_and_holds_its_reference(name, monkeypatch):
    paper = reproduce.PAPERS[name]
    monkeypatch.chdir(REPO)  # from a clone's root the commands name the documented path, a link to the package data
    path = paper.space_file(name)
    assert path == Path("search_spaces") / "papers" / f"{name}.yaml"
    assert path.resolve().parent == REPO / "raytune_fl" / "spaces" / "papers" and path.exists()
    space = load_space(path)
    assert paper.reference in space.variants and not space.variants[paper.reference].search
    assert space.base.partition.val_fraction > 0  # tuning selects on validation, never on the test set
    assert space.tune.metric == ("val_acc" if paper.primary == TEST_ACC else PERSONAL_VAL_ACC)
    for variant in space.variants.values():
        assert variant.method in METHODS
    # a paper table tunes something, unless it compares fixed forms (qffl_forms: both forms at the same q;
    # the privacy pages: each method at its defaults, at three budgets)
    fixed_forms = ("qffl_forms", "privacy_budget", "privacy_central")
    assert [v for v in space.variants.values() if v.search] or name in fixed_forms, "nothing to tune"
    assert reproduce._alphas(paper.alphas) and paper.seeds >= 1 and paper.partition_seeds >= 1
    # every baseline the page compares with is a fixed variant of the space, the primary reference first, and the
    # contenders compared with the further ones are variants that are no reference
    if paper.references:
        assert paper.references[0] == paper.reference
        assert all(r in space.variants and not space.variants[r].search for r in paper.references)
        assert all(c in space.variants and c not in paper.references for c in paper.contenders)
    else:
        assert not paper.contenders


def test_the_univarfl_pages_compare_univarfl_with_every_baseline_the_paper_names():
    for name in ("univarfl_paper", "univarfl_comparison"):
        paper = reproduce.PAPERS[name]
        assert paper.references == ("fedavg", "fedprox", "moon", "freeze")
        assert paper.contenders == ("univarfl_default", "univarfl_tuned")
        assert paper.seeds == 5  # held out from the search: 5 pairs per comparison
    assert "the project" not in reproduce.PAPERS["feduv_table4"].shape  # Freeze is a row of the paper's Table 4


FIND_FROM_ELSEWHERE = """
import json, raytune_fl
from pathlib import Path
from raytune_fl.cli import reproduce
files = {name: str(paper.space_file(name)) for name, paper in reproduce.PAPERS.items()}
print(json.dumps({"package": str(Path(raytune_fl.__file__).parent), "files": files}))
"""


def test_the_paper_spaces_are_found_in_the_package_from_a_folder_outside_the_repository(tmp_path):
    """An installed wheel has no search_spaces/ beside it: `reproduce NAME` reads the package's own files, whatever
    the working directory (the wheel itself, from an empty folder: tools/fresh_install.sh)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}  # as installed
    done = subprocess.run(
        [sys.executable, "-c", FIND_FROM_ELSEWHERE], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(found["files"]) == set(reproduce.PAPERS)
    for name, file in found["files"].items():
        path = Path(file)
        assert path.is_file() and not path.is_symlink(), file
        assert path.parent == Path(found["package"]) / "spaces" / "papers", file
        assert load_space(path).name, name


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["feduv_table4", "--alphas", "0.1,x"], "--alphas: comma-separated positive numbers"),
        (["feduv_table4", "--alphas", "0.1,-1"], "--alphas: comma-separated positive numbers"),
        (["feduv_table4", "--seeds", "0"], "--seeds: at least 1 (got 0)"),
        (["univarfl_paper", "--partition-seeds", "0"], "--partition-seeds: at least 1 (got 0)"),
        (["personalised_shards", "--alphas", "0.1"], "--alphas: table personalised_shards's settings are not alphas"),
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


@pytest.mark.parametrize(
    ("program", "expected"),
    [
        ("/venv/bin/raytune-fl", ["raytune-fl reproduce", "raytune-fl tune", "raytune-fl ablate"]),
        ("scripts/reproduce.py", ["python scripts/reproduce.py", "python scripts/tune.py", "python scripts/ablate.py"]),
    ],
)
def test_the_page_names_the_commands_as_the_user_started_this_one(program, expected, monkeypatch):
    monkeypatch.setattr(sys, "argv", [program, "fedld_table2", "--resume"])
    lines = reproduce._commands(None, ["--space", "s.yaml", "--resume"], ["--space", "s.yaml"], searched=["margin"])
    assert lines == [f"{expected[0]} fedld_table2", f"{expected[1]} --space s.yaml", f"{expected[2]} --space s.yaml"]


def test_a_personalised_table_ablates_on_its_primary_metric_over_its_own_grid(tmp_path):
    """The stages' command lines: the ablation scores personal_test_acc, and the shards table's setting is its grid."""
    import argparse

    from raytune_fl.metrics import PERSONAL_TEST_ACC

    for name, grid in (("personalised", "alpha=0.1,1"), ("personalised_shards", "partition.classes_per_client=2")):
        paper = reproduce.PAPERS[name]
        args = reproduce.build_parser().parse_args([name, "--work", str(tmp_path / name), "--out", str(tmp_path)])
        stages = reproduce._stages(args, paper, paper.space_file(name))
        assert isinstance(args, argparse.Namespace) and paper.primary == PERSONAL_TEST_ACC
        assert f"--metric={PERSONAL_TEST_ACC}" in stages.ablate_argv
        assert stages.ablate_argv[stages.ablate_argv.index("--grid") + 1] == grid
        assert "--metric" not in " ".join(
            reproduce._stages(
                reproduce.build_parser().parse_args(
                    ["feduv_table4", "--work", str(tmp_path / "f"), "--out", str(tmp_path)]
                ),
                reproduce.PAPERS["feduv_table4"],
                reproduce.PAPERS["feduv_table4"].space_file("feduv_table4"),
            ).ablate_argv
        )
