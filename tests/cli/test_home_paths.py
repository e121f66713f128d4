"""Issue 59: `~` in a path option is the home folder, as the shell would have made it where it did not (quoted, or
after `--option=`): `--storage '~/x'` made a folder named `~`. Every option that names a path or a store, and
MLFLOW_TRACKING_URI, is expanded before any check reads it (paths.py's expand_home, their argparse type; a
dataset's download_url too: tests/data/test_download.py)."""

from __future__ import annotations

import argparse

import pytest
import yaml

from raytune_fl.cli import ablate, common, dashboard, reproduce
from raytune_fl.cli.tune import build_parser
from raytune_fl.paths import expand_home
from raytune_fl.runtime.storage import make_storage
from tests.support import tiny_space


@pytest.fixture
def home(tmp_path, monkeypatch):
    folder = tmp_path / "home"
    folder.mkdir()
    monkeypatch.setenv("HOME", str(folder))
    monkeypatch.chdir(tmp_path)
    return folder


@pytest.mark.parametrize(
    ("given", "expanded"),
    [
        ("~/runs", "{home}/runs"),
        ("~", "{home}"),
        ("sqlite:///~/m.db", "sqlite:///{home}/m.db"),  # sqlite:/// then the path: ~/m.db
        ("file:~/mlruns", "file:{home}/mlruns"),
        ("file://~/mlruns", "file://{home}/mlruns"),
        ("sqlite:////abs/m.db", "sqlite:////abs/m.db"),  # nothing to expand
        ("s3://bucket/~x", "s3://bucket/~x"),
        ("runs/~x", "runs/~x"),  # the shell leaves a ~ inside a path too
        ("http://127.0.0.1:5000", "http://127.0.0.1:5000"),
    ],
)
def test_a_leading_tilde_is_the_home_folder_in_paths_and_uris(home, given, expanded):
    assert expand_home(given) == expanded.format(home=home)


def test_every_path_option_of_every_command_is_expanded(home):
    tune = build_parser().parse_args(
        [
            "--space",
            "~/s.yaml",
            "--storage",
            "~/ray",
            "--mlflow-uri",
            "sqlite:///~/m.db",
            "--optuna-storage=sqlite:///~/o.db",
        ]
    )
    assert (tune.space, tune.storage) == (f"{home}/s.yaml", f"{home}/ray")
    assert (tune.mlflow_uri, tune.optuna_storage) == (f"sqlite:///{home}/m.db", f"sqlite:///{home}/o.db")
    assert ablate.build_parser().parse_args(["--space", "s.yaml", "--out=~/table"]).out == f"{home}/table"
    assert dashboard.build_parser().parse_args(["--space", "s.yaml", "--out", "~/d.html"]).out == f"{home}/d.html"
    again = reproduce.build_parser().parse_args(["feduv_table4", "--out", "~/pages", "--work", "~/work"])
    assert (again.out, again.work) == (f"{home}/pages", f"{home}/work")


def test_mlflow_tracking_uri_from_the_environment_is_expanded_too(home, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///~/mlflow.db")
    assert common.tracking_uri(argparse.Namespace(mlflow_uri=None)) == f"sqlite:///{home}/mlflow.db"
    assert common.tracking_uri(argparse.Namespace(mlflow_uri="http://h:5000")) == "http://h:5000"


def test_a_quoted_tilde_storage_makes_the_folder_in_home_and_none_named_tilde(home, tmp_path):
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(tiny_space()))
    args = build_parser().parse_args(["--space", "s.yaml", "--storage", "~/ray_results"])
    common.resolve_space(args, warnings=False)  # the checks before Ray
    make_storage(args.storage)
    assert (home / "ray_results").is_dir() and not (tmp_path / "~").exists()
