"""`raytune-fl COMMAND`: the installed entry point dispatches to the same code as the scripts."""

from __future__ import annotations

import importlib
import io
import subprocess
import sys
from importlib import metadata

import pytest

from raytune_fl.cli import console
from tests.support import REPO


@pytest.fixture(autouse=True)
def _own_argv(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["raytune-fl"])  # main() renames argv[0] for the chosen command


def test_the_package_declares_the_console_script():
    scripts = {e.name: e.value for e in metadata.entry_points(group="console_scripts")}
    assert scripts.get("raytune-fl") == "raytune_fl.cli.console:run"


@pytest.mark.parametrize("command", sorted(console.COMMANDS))
def test_each_command_is_a_module_with_main(command):
    module = importlib.import_module(console.COMMANDS[command][0])
    assert callable(module.main)


def test_version_and_usage(capsys):
    assert console.main(["--version"]) == 0
    assert capsys.readouterr().out == f"raytune-fl {metadata.version('raytune-fl')}\n"
    assert console.main([]) == 2  # nothing asked: the usage, as an error
    out = capsys.readouterr().out
    assert out.startswith("usage: raytune-fl {tune,ablate,dashboard,reproduce}")
    assert all(f"\n  {name} " in out for name in console.COMMANDS)
    assert console.main(["--help"]) == 0


def test_an_unknown_command_is_refused_with_the_closest_one(capsys):
    assert console.main(["ablte", "--space", "x.yaml"]) == 2
    first = capsys.readouterr().err.splitlines()[0]
    assert first == "raytune-fl: unknown command 'ablte'; did you mean 'ablate'?"


@pytest.mark.parametrize("command", ["tune", "ablate", "dashboard", "reproduce"])
def test_a_commands_help_names_it_as_typed(command, capsys):
    with pytest.raises(SystemExit) as done:
        console.main([command, "--help"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: raytune-fl {command} ")


def test_the_entry_point_runs_a_command_in_a_fresh_process(tmp_path):
    """run() exits with the command's code: a missing space file is exit 2, nothing written."""
    code = "from raytune_fl.cli.console import run; run()"
    done = subprocess.run(
        [sys.executable, "-c", code, "tune", "--space", "missing.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 2, done.stderr
    assert "missing.yaml" in done.stderr.splitlines()[0]
    assert list(tmp_path.iterdir()) == []


def test_a_command_run_with_its_output_piped_gets_rays_worker_lines_plain(monkeypatch, tmp_path, capsys):
    """Issue 46: `raytune-fl tune ... | tee log`: Ray's `(name pid=...)` prefix of a worker's line is coloured by
    default; the console makes it plain, before Ray starts, where the output is not a terminal (a real piped study:
    tests/system/test_piped_output.py)."""
    from ray._private.worker import print_worker_logs

    monkeypatch.delenv("RAY_COLOR_PREFIX", raising=False)
    assert console.main(["tune", "--space", str(tmp_path / "missing.yaml")]) == 2  # pytest's capture: not a tty
    assert "missing.yaml" in capsys.readouterr().err
    line = io.StringIO()
    print_worker_logs({"pid": 7, "task_name": "federated_trial", "is_err": True, "lines": ["notice: x"]}, line)
    assert line.getvalue() == "(federated_trial pid=7) notice: x\n"
