"""The "next" blocks of tune, ablate and reproduce print commands to copy: each works from the folder the user ran
in, typed as the user started the command (issue 50: `python ../../scripts/tune.py` in examples/<x>/ was told
`python scripts/ablate.py` and `python dashboards/build.py`, which are not there). Every printed command's script
must exist from that folder, its --space file too, and its options must parse with that command's own parser."""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
import sys
from pathlib import Path

import pytest

from raytune_fl.cli import ablate, common, dashboard, reproduce, stopping, tune
from raytune_fl.tune.outcome import VariantOutcome
from tests.support import REPO

PARSERS = {
    "tune": tune.build_parser,
    "ablate": ablate.build_parser,
    "dashboard": dashboard.build_parser,
    "reproduce": reproduce.build_parser,
}
BY_SCRIPT = {script: command for command, script in common.SCRIPTS.items()}
URI = "sqlite:////tmp/next/mlflow.db"


def _commands(printed: str) -> list[list[str]]:
    """The package's command lines a block prints (`python <script> ...`, `raytune-fl <command> ...`), split."""
    found = []
    for line in printed.splitlines():
        _, colon, command = line.partition(":  ")
        if colon and command.startswith(("python ", "raytune-fl ")):
            found.append(shlex.split(command))
    return found


def _check_runs_from(words: list[str], cwd: Path, console: bool) -> str:
    """That the command runs from `cwd`: its script is there (or it is the console command, as the user typed),
    its options parse with its own parser, and its --space file is there; the command's name."""
    if console:
        assert words[0] == "raytune-fl", words
        command, argv = words[1], words[2:]
    else:
        assert words[0] == "python", words
        script = cwd / words[1]
        assert script.is_file(), f"{words[1]} does not exist from {cwd}"
        command, argv = BY_SCRIPT[script.resolve().relative_to(REPO).as_posix()], words[2:]
    args = PARSERS[command]().parse_args(argv)  # a wrong option exits with 2: the test fails
    if getattr(args, "space", None):
        assert (cwd / args.space).is_file(), f"--space {args.space} does not exist from {cwd}"
    return command


def _outcome(variant: str) -> VariantOutcome:
    metrics = {"val_acc": 0.5, "test_acc": 0.5, "round": 4.0}
    outcome = VariantOutcome(variant, variant, {}, metrics, {"finished": 1}, None, "", 8.0, val_samples=400)
    outcome.optuna_study, outcome.optuna_storage, outcome.model_id = f"q-{variant}", "sqlite:///o.db", "m-1"
    return outcome


# (argv[0] as typed, the folder run in, --space as given): the case first
CASES = [
    ("../../scripts/tune.py", "examples/custom_method", "space.yaml"),
    ("scripts/tune.py", ".", "search_spaces/quickstart.yaml"),
    ("tune.py", "scripts", "../search_spaces/quickstart.yaml"),
    ("{repo}/scripts/tune.py", "{tmp}", "q.yaml"),  # an absolute path, from a folder outside the clone
    ("raytune-fl tune", "{tmp}", "q.yaml"),  # the console command (console.py names argv[0] so)
    ("/venv/bin/raytune-fl", "{tmp}", "q.yaml"),
    ("-c", ".", "search_spaces/quickstart.yaml"),  # `python -c`: the clone's root's scripts
]


@pytest.fixture(params=CASES, ids=[f"{a} in {c}" for a, c, _ in CASES])
def ran(request, tmp_path, monkeypatch) -> tuple[str, Path, str]:
    """argv[0], the folder, the space as given; the process's own argv[0] and folder set to them as well (the
    commands that continue a stopped one are built from those)."""
    argv0, folder, space = (part.format(repo=REPO, tmp=tmp_path) for part in request.param)
    cwd = REPO / folder  # an absolute folder stays itself
    shutil.copy(REPO / "search_spaces" / "quickstart.yaml", tmp_path / "q.yaml")
    monkeypatch.setattr(sys, "argv", [argv0])
    monkeypatch.chdir(cwd)
    return argv0, cwd, space


def _console(argv0: str) -> bool:
    return "raytune-fl" in argv0


def test_tunes_next_commands_run_from_the_folder_it_ran_in(ran, capsys):
    argv0, cwd, space = ran
    args = argparse.Namespace(space=space, plugin=["my_lab.ext"], mlflow_uri=None, variants="fedavg,fedprox")
    args.per_setting = ["alpha=0.1,1.0"]
    tune.print_next_steps(args, URI, "quickstart", "1", [_outcome("fedavg")])  # the process's argv[0] and folder
    printed = capsys.readouterr().out
    found = [_check_runs_from(words, cwd, _console(argv0)) for words in _commands(printed)]
    assert found == ["ablate", "dashboard"]
    tune.print_next_steps(args, URI, "quickstart", "1", [_outcome("fedavg")], argv0=argv0, cwd=cwd)
    assert capsys.readouterr().out == printed  # the same, given


def test_tunes_ablate_command_carries_what_the_study_was_given(capsys):
    args = argparse.Namespace(space="s p.yaml", plugin=["a.b"], mlflow_uri="sqlite:///m.db", variants="x,y")
    args.per_setting = ["alpha=0.1,1.0", "rho=0.5"]
    tune.print_next_steps(args, URI, "s", "1", [], argv0="raytune-fl tune", cwd=REPO)
    ablate_line, dashboard_line = _commands(capsys.readouterr().out)
    assert ablate_line == [
        *("raytune-fl", "ablate", "--space", "s p.yaml", "--plugin", "a.b", "--mlflow-uri", "sqlite:///m.db"),
        *("--variants", "x,y", "--grid", "alpha=0.1,1.0", "--grid", "rho=0.5", "--per-setting", "--seeds", "3"),
    ]
    assert dashboard_line == ["raytune-fl", "dashboard", *ablate_line[2:8]]


@pytest.mark.parametrize("no_dashboard", [False, True])
def test_ablates_next_commands_run_from_the_folder_it_ran_in(ran, no_dashboard, capsys):
    argv0, cwd, space = ran
    args = argparse.Namespace(space=space, plugin=[], mlflow_uri="sqlite:///m.db", no_dashboard=no_dashboard)
    with stopping.guarded("ablate", ["--space", space, "--seeds", "2"]):  # what names the resume command
        ablate.print_next_steps(args, URI, "quickstart", "1", unfinished=True, argv0=argv0, cwd=cwd)
    found = [_check_runs_from(words, cwd, _console(argv0)) for words in _commands(capsys.readouterr().out)]
    assert found == ["dashboard", "ablate"]  # the dashboard, and the cells that did not finish (--resume)


def test_reproduces_commands_run_from_the_folder_it_ran_in(ran, capsys):
    argv0, cwd, _ = ran
    argv0 = re.sub(r"\btune(\.py)?$", r"reproduce\1", argv0)  # scripts/reproduce.py, raytune-fl reproduce
    sys.argv[0] = argv0
    space_file = reproduce.PAPERS["fedld_table2"].space_file("fedld_table2")  # from the clone, else the package's
    shared = ["--space", str(space_file), "--mlflow-uri", URI, "--storage", "/tmp/next/ray_results"]
    page = reproduce._commands(
        ["fedld_table2", "--seeds", "2"],
        [*shared, "--variants", "margin,principal", "--no-models"],
        [*shared, "--seeds", "2", "--grid", "alpha=0.1,0.5", "--out", "/tmp/next/ablation"],
        searched=["margin", "principal"],
    )
    reproduce.print_next_steps(Path("docs/results/fedld_table2.md"), space_file, URI, argv0=argv0, cwd=cwd)
    printed = [shlex.split(line) for line in page] + _commands(capsys.readouterr().out)
    found = [_check_runs_from(words, cwd, _console(argv0)) for words in printed]
    assert found == ["reproduce", "tune", "ablate", "dashboard"]


def test_the_results_pages_dashboard_line_names_the_command_as_started(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["raytune-fl reproduce"])
    line = reproduce.dashboard_command(Path("/s.yaml"), URI)
    assert line == f"raytune-fl dashboard --space /s.yaml --mlflow-uri {URI}"
    monkeypatch.setattr(sys, "argv", ["scripts/reproduce.py"])
    line = reproduce.dashboard_command(REPO / "s.yaml", URI, cwd=REPO)
    assert line == f"python dashboards/build.py --space s.yaml --mlflow-uri {URI}"


@pytest.mark.parametrize(
    ("argv0", "folder", "expected"),
    [
        ("../../scripts/tune.py", "examples/custom_method", "python ../../scripts/ablate.py"),
        ("scripts/tune.py", ".", "python scripts/ablate.py"),
        ("{repo}/scripts/tune.py", ".", "python scripts/ablate.py"),  # under the folder: shown from it
        ("{repo}/scripts/tune.py", "{tmp}", "python {repo}/scripts/ablate.py"),  # elsewhere: as typed
        ("tune.py", "scripts", "python ablate.py"),
        ("raytune-fl tune", "{tmp}", "raytune-fl ablate"),
        ("-c", "{tmp}", "python scripts/ablate.py"),  # nothing known of a clone: the path from its root, as documented
    ],
)
def test_a_command_is_named_as_this_one_was_started_from_the_same_folder(argv0, folder, expected, tmp_path):
    argv0, folder, expected = (x.format(repo=REPO, tmp=tmp_path) for x in (argv0, folder, expected))
    assert common.command_line("ablate", argv0, REPO / folder) == expected
