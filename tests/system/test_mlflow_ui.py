"""The real MLflow UI, in headless Chromium, on a real study logged to a real `mlflow server` (127.0.0.1): the
experiment is marked model training, each variant's trial runs nest under it, and the screenshot tool draws its
charts. The browser is driven over the DevTools protocol on a pipe (tools/browser.py, tools/mlflow_ui.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from mlflow.tracking import MlflowClient

from raytune_fl.tracking.schema import EXPERIMENT_KIND_TRAINING, TAG_EXPERIMENT_KIND, TAG_PARENT_RUN
from raytune_fl.tracking.urls import runs_url
from tests.support import REPO, tiny_space
from tests.support.mlflow_servers import start_mlflow_server, stop_mlflow_server
from tools.browser import CHROMIUM, Browser
from tools.mlflow_ui import MlflowUI, nested

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def served(ray_cluster, tmp_path_factory):
    from raytune_fl.cli import main

    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: .ci/run installs it (apt-get install chromium)")
    root = tmp_path_factory.mktemp("mlflow_ui")
    process, url = start_mlflow_server(root)
    try:
        data = tiny_space("ui_tiny", resources={"actors": 0})  # in-process trials: quick
        data["tune"]["max_concurrent"] = 2
        space = root / "ui_tiny.yaml"
        space.write_text(yaml.safe_dump(data, sort_keys=False))
        started = time.time()
        with pytest.MonkeyPatch.context() as patch:
            patch.chdir(root)  # anything a study writes to its working directory lands here
            code = main(["--space", str(space), "--mlflow-uri", url, "--storage", str(root / "ray")])
        assert code == 0
        print(f"study: {time.time() - started:.0f} s")
        client = MlflowClient(url)
        experiment = client.get_experiment_by_name("ui_tiny")
        runs = client.search_runs([experiment.experiment_id])
        names = {r.info.run_id: r.info.run_name for r in runs}
        tree: dict[str, list[str]] = {}
        for run in runs:
            if TAG_PARENT_RUN not in run.data.tags:
                tree.setdefault(run.info.run_name, [])
        for run in runs:
            if TAG_PARENT_RUN in run.data.tags:
                tree[names[run.data.tags[TAG_PARENT_RUN]]].append(run.info.run_name)
        yield SimpleNamespace(url=url, name="ui_tiny", experiment=experiment, tree=tree, runs=runs, root=root)
    finally:
        stop_mlflow_server(process)


def test_the_experiment_is_marked_model_training_and_its_runs_url_opens_the_runs_table(served):
    assert served.experiment.tags[TAG_EXPERIMENT_KIND] == EXPERIMENT_KIND_TRAINING
    experiment_id = served.experiment.experiment_id
    with Browser() as browser:
        ui = MlflowUI(browser.new_page(), served.url)
        assert ui.experiment_id(served.name) == experiment_id
        # MLflow 3.10-3.17 open a bare experiment link on the browser's workflow type (GenAI in a fresh browser),
        # whatever the experiment's kind tag: printed, not asserted, so a newer MLflow that honours the tag passes
        ui.page.goto(f"{served.url}/#/experiments/{experiment_id}")
        ui.page.wait_for("/overview|traces|runs/.test(location.hash)", 120, "the experiment page")
        print(f"a bare experiment link in a fresh browser opens: {ui.page.evaluate('location.hash')}")
        ui.page.goto(runs_url(served.url, experiment_id))
        ui.page.wait_for("document.querySelectorAll('.ag-row a[href*=\"/runs/\"]').length > 0", 120, "the runs table")
        assert f"#/experiments/{experiment_id}/runs?" in ui.page.evaluate("location.href")
        assert "Model training" in ui.page.text()


def test_the_runs_page_shows_each_variant_with_its_trial_runs_nested_under_it(served, tmp_path):
    expected = {parent: sorted(children) for parent, children in served.tree.items()}
    assert expected == {"full": ["full-000", "full-001", "full-002"], "fedavg": ["fedavg-000"]}
    started = time.time()
    with Browser() as browser:
        ui = MlflowUI(browser.new_page(1800, 900), served.url)
        rows = ui.open_runs(served.experiment.experiment_id)  # the parents' expanders clicked
        assert ui.matching_runs() == len(served.runs) == 6
        drawn = {parent.name: sorted(child.name for child in children) for parent, children in nested(rows)}
        assert drawn == expected, rows
        assert {row.run_id for row in rows} == {run.info.run_id for run in served.runs}
        assert [row.name for row in rows if row.depth == 0] == ["fedavg", "full"]  # newest first, as started
        assert all(row.expander for row in rows if row.depth == 0)
        assert not any(row.expander for row in rows if row.depth == 1)
        columns = ui.add_columns(["val_acc", "trial_status"])
        assert {"val_acc", "trial_status"} <= set(columns), columns
        text = ui.page.text()
        statuses = {run.data.tags["trial_status"] for run in served.runs if TAG_PARENT_RUN in run.data.tags}
        assert statuses and all(status in text for status in statuses), statuses  # finished, stopped_early
        shot = ui.page.screenshot(tmp_path / "mlflow_runs.png")
    print(f"runs page screenshot: {shot} ({time.time() - started:.0f} s in Chromium)")
    assert shot.read_bytes()[:8] == PNG and shot.stat().st_size > 30_000  # a blank page is a few kB


def test_the_screenshot_script_draws_runs_charts_and_parallel_coordinates(served, tmp_path):
    out = tmp_path / "docs"
    command = [sys.executable, "-m", "tools.mlflow_ui", "--mlflow-uri", served.url]
    started = time.time()
    done = subprocess.run(
        [*command, "--experiment", served.name, "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    print(done.stdout, done.stderr[-3000:], f"({time.time() - started:.0f} s)")
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    assert f"wrote: {out / 'mlflow_runs.png'} (4 trial runs nested under 2 parent runs)" in lines
    assert f"wrote: {out / 'mlflow_charts.png'} (val_acc per round of 4 trial runs)" in lines
    assert f"wrote: {out / 'mlflow_parallel.png'} (variant full: 3 trials, axes lambda, mu, val_acc)" in lines
    for name in ("mlflow_runs.png", "mlflow_charts.png", "mlflow_parallel.png"):
        data = (out / name).read_bytes()
        assert data[:8] == PNG and 30_000 < len(data) < 300_000, (name, len(data))

    missing = subprocess.run(
        [*command, "--experiment", "no_such_study", "--out", str(tmp_path / "none")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert missing.returncode == 1 and "no experiment 'no_such_study'" in missing.stderr, missing.stderr
    sqlite = subprocess.run(
        [sys.executable, "-m", "tools.mlflow_ui", "--mlflow-uri", "sqlite:///m.db", "--experiment", "x"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert sqlite.returncode == 2 and "mlflow ui --backend-store-uri" in sqlite.stderr
    assert not (tmp_path / "none").exists()
