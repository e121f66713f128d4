"""`ablate.py --partition-seeds N`: plans crossing training seeds with splits, by hand (no Ray); the summary's
interval and the parent's summary metrics on tiny hand-made results."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from raytune_fl.ablation.grid import parse_grid, splits
from raytune_fl.ablation.plan import make_plan
from raytune_fl.ablation.run import with_partition_seeds, write_table
from raytune_fl.ablation.sources import variant_source
from raytune_fl.ablation.table import mean_interval, summarise, to_markdown
from raytune_fl.cli.ablate import main as ablate
from raytune_fl.config import ConfigError, parse_space
from raytune_fl.metrics import TEST_ACC
from raytune_fl.tracking.records import ablation_cell, summary_metrics
from tests.support import ablate_argv, tiny_space

T975_2 = 4.302653  # Student's t_{0.975, 2 dof}, from a t-table


def _plan(partition_seeds: int | None = None, **base):
    s = parse_space(tiny_space(**base))
    axes = parse_grid(["alpha=0.5,1.0"])
    sources = {name: variant_source(s, name, None) for name in s.variants}
    extra = {} if partition_seeds is None else {"partition_seeds": partition_seeds}
    return make_plan(s, axes, [0, 1], sources, **extra)


# ---- plans ----------------------------------------------------------------------------------------------


def test_one_partition_seed_is_the_plan_made_without_the_option():
    before, one = _plan(), _plan(1)
    assert one.fingerprint == before.fingerprint
    assert [c.key for c in one.cells] == [c.key for c in before.cells]
    assert [c.experiment for c in one.cells] == [c.experiment for c in before.cells]
    assert one.cells[0].key == "full/seed0/alpha=0.5" and one.cells[0].split is None
    assert {c.partition_seed for c in one.cells} == {0}  # tiny_space's partition.seed
    assert (
        one.summary_line()
        == before.summary_line()
        == ("ablation: 2 variants x 2 seeds x 2 settings = 8 runs (settings: alpha=0.5, alpha=1.0)")
    )


def test_two_partition_seeds_double_the_cells_crossed_with_the_training_seeds():
    plan = _plan(2, partition={"kind": "dirichlet", "alpha": 0.5, "clients": 3, "min_size": 20, "seed": 7})
    assert len(plan.cells) == 16 and plan.partition_seeds == 2 and plan.split_seeds == [7, 8]
    assert [c.key for c in plan.cells][:5] == [
        "full/seed0/split7/alpha=0.5",
        "full/seed0/split8/alpha=0.5",
        "full/seed1/split7/alpha=0.5",
        "full/seed1/split8/alpha=0.5",
        "fedavg/seed0/split7/alpha=0.5",
    ]
    assert len({c.key for c in plan.cells}) == 16
    for cell in plan.cells:  # the split is the experiment's partition seed; the setting's alpha is kept
        assert cell.experiment.partition.seed == cell.split == cell.partition_seed
        assert cell.experiment.partition.alpha == float(cell.setting.removeprefix("alpha="))
    assert {(c.seed, c.split) for c in plan.cells} == {(0, 7), (0, 8), (1, 7), (1, 8)}
    assert plan.fingerprint != _plan(1).fingerprint
    assert "2 variants x 2 seeds x 2 partition seeds x 2 settings = 16 runs" in plan.summary_line()
    # the cell's run carries its split as a tag, and its params say it too (partition.seed)
    run = ablation_cell(plan.cells[1], "note")
    assert run.name == "full/seed0/split8/alpha=0.5" and run.tags["partition_seed"] == "8"
    assert run.params["partition.seed"] == 8


def test_each_split_of_each_setting_is_a_partition_the_driver_checks():
    plan = _plan(2)
    assert list(plan.partitions) == ["split0/alpha=0.5", "split1/alpha=0.5", "split0/alpha=1.0", "split1/alpha=1.0"]
    assert plan.partitions["split1/alpha=1.0"].partition.seed == 1
    assert plan.partitions["split1/alpha=1.0"].partition.alpha == 1.0
    assert {c.data_label for c in plan.cells} == set(plan.partitions)
    assert list(splits(plan.experiments, 1)) == ["alpha=0.5", "alpha=1.0"]  # N = 1: the settings themselves


@pytest.mark.parametrize("n", [0, -2])
def test_fewer_than_one_partition_seed_is_refused_naming_the_option(n):
    with pytest.raises(ConfigError) as error:
        _plan(n)
    assert str(error.value).splitlines()[0] == f"--partition-seeds: at least 1 (got {n})"


def test_partition_seeds_beside_a_grid_over_the_partition_seed_are_refused():
    s = parse_space(tiny_space())
    axes = parse_grid(["partition.seed=1,2"])
    sources = {name: variant_source(s, name, None) for name in s.variants}
    with pytest.raises(ConfigError, match=r"^--partition-seeds: 2 splits per cell, but --grid partition.seed"):
        make_plan(s, axes, [0], sources, 2)
    assert len(make_plan(s, axes, [0], sources, 1).cells) == 4  # alone, the grid is fine


@pytest.mark.parametrize(
    "extra, first_line",
    [
        (["--partition-seeds", "0"], "--partition-seeds: at least 1 (got 0)"),
        (["--partition-seeds", "2", "--grid", "partition.seed=3,4"], "--partition-seeds: 2 splits per cell, but"),
    ],
)
def test_the_command_line_refuses_bad_partition_seeds_before_anything_runs(tmp_path, capsys, extra, first_line):
    assert ablate([*ablate_argv(tmp_path), *extra]) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[0].removeprefix("error: ").startswith(first_line), err
    assert "Traceback" not in err and not (tmp_path / "o").exists() and not (tmp_path / "m.db").exists()


# ---- results, the summary and the parent's metrics -----------------------------------------------------------


def test_results_get_each_cells_partition_seed_after_the_seed():
    plan = _plan(2)
    cells = [plan.cells[1], plan.cells[2]]  # full/seed0/split1, full/seed1/split0
    results = pd.DataFrame(
        {"run_id": ["r1", "r2", "r3"], "seed": [0, 1, 5], "cell": [c.key for c in cells] + ["not/of/the/plan"]}
    )
    out = with_partition_seeds(results, plan.cells)
    assert list(out.columns) == ["run_id", "seed", "partition_seed", "cell"]
    assert list(out["partition_seed"]) == [1, 0, -1]
    assert list(with_partition_seeds(out, plan.cells)["partition_seed"]) == [1, 0, -1]  # replaced, not doubled


def _results() -> pd.DataFrame:
    # full: 0.70, 0.72, 0.74 (2 splits x 2 seeds, one failed); fedavg: a single finished run
    return pd.DataFrame(
        {
            "variant": ["full"] * 4 + ["fedavg"] * 2,
            "setting": ["a"] * 6,
            "seed": [0, 0, 1, 1, 0, 1],
            "partition_seed": [0, 1, 0, 1, 0, 0],
            "status": ["finished", "finished", "finished", "error", "finished", "error"],
            "test_acc": [0.70, 0.72, 0.74, 0.0, 0.60, math.nan],
        }
    )


def test_summary_has_the_t_interval_of_the_mean_and_the_splits_it_counted():
    summary = summarise(_results())
    full, fedavg = summary.to_dict("records")
    # full: mean 0.72, sd 0.02, n 3: 0.72 ± 4.3027 x 0.02 / sqrt 3 = 0.72 ± 0.049683
    assert (full["mean"], full["n"], full["runs"]) == (pytest.approx(0.72), 3, 4)
    assert full["std"] == pytest.approx(0.02)
    assert (full["ci_low"], full["ci_high"]) == pytest.approx((0.670317, 0.769683), abs=1e-6)
    assert full["ci_high"] - full["mean"] == pytest.approx(T975_2 * 0.02 / math.sqrt(3))
    assert full["partition_seeds"] == 2 and fedavg["partition_seeds"] == 1
    assert fedavg["n"] == 1 and math.isnan(fedavg["ci_low"]) and math.isnan(fedavg["ci_high"])  # one run: no interval
    assert mean_interval([0.5]) == pytest.approx((math.nan, math.nan), nan_ok=True)
    assert "over 2 training seeds x 2 partition seeds (the split varies); **bold**" in to_markdown(summary, seeds=2)
    one_split = summarise(_results().drop(columns="partition_seed"))
    assert "over 2 training seeds; **bold**" in to_markdown(one_split, seeds=2)


def test_the_parent_logs_mean_sd_n_and_the_interval_per_variant_and_setting(tmp_path):
    results = _results().assign(setting="alpha=0.1,rho=0.5")
    metrics = summary_metrics(summarise(results), TEST_ACC)
    prefix = "ablation/full/alpha-0.1_rho-0.5/test_acc_"  # MLflow names: the setting as its artifact folder
    assert metrics[prefix + "mean"] == pytest.approx(0.72) and metrics[prefix + "sd"] == pytest.approx(0.02)
    assert metrics[prefix + "n"] == 3.0
    assert (metrics[prefix + "ci_low"], metrics[prefix + "ci_high"]) == pytest.approx((0.670317, 0.769683), abs=1e-6)
    assert math.isnan(metrics["ablation/fedavg/alpha-0.1_rho-0.5/test_acc_ci_low"])  # MLflow drops it when logged
    assert len(metrics) == 10
    summary, files = write_table(results, 2, tmp_path, partition_seeds=2)
    written = pd.read_csv(files["summary.csv"])
    assert list(written.columns) == [
        "variant",
        "setting",
        "mean",
        "std",
        "n",
        "runs",
        "collapsed",
        "ci_low",
        "ci_high",
        "partition_seeds",
        "level",
    ]
    assert written.loc[0, "ci_low"] == pytest.approx(0.670317, abs=1e-6) and written.loc[0, "level"] == 0.95
    assert "x 2 partition seeds (the split varies)" in files["table.md"].read_text()


def test_a_real_ablation_records_the_split_and_logs_its_summary_on_the_parent(ablation_store):
    # the shared store's ablation: 2 variants x 2 seeds x alpha in {0.5, 1.0}, the file's split (partition.seed 0)
    from mlflow.tracking import MlflowClient

    results = pd.read_parquet(ablation_store.out / "ablation_results.parquet")
    assert list(results.columns[4:7]) == ["seed", "partition_seed", "setting"] and set(results["partition_seed"]) == {0}
    summary = pd.read_csv(ablation_store.out / "ablation_summary.csv")
    client = MlflowClient(ablation_store.uri)
    experiment = client.get_experiment_by_name(ablation_store.space_name).experiment_id
    parent = client.search_runs([experiment], "tags.stage = 'ablation' and tags.role = 'parent'")[0]
    assert "partition_seeds" not in parent.data.tags  # only an ablation that varies the split says so
    for row in summary.itertuples():
        runs = results[(results["variant"] == row.variant) & (results["setting"] == row.setting)]["test_acc"]
        assert row.mean == pytest.approx(runs.mean()) and row.n == 2
        (low, high), half = (row.ci_low, row.ci_high), 12.706205 * runs.std(ddof=1) / math.sqrt(2)  # t_{0.975, 1}
        # the t-interval of the mean, clipped to [0, 1] (an accuracy; with 2 runs it easily reaches outside)
        expected = (max(0.0, runs.mean() - half), min(1.0, runs.mean() + half))
        assert (low, high) == pytest.approx(expected, abs=1e-6)
        prefix = f"ablation/{row.variant}/{row.setting.replace('=', '-')}/test_acc_"
        for statistic, value in (("mean", row.mean), ("sd", row.std), ("n", 2), ("ci_low", low), ("ci_high", high)):
            assert parent.data.metrics[prefix + statistic] == pytest.approx(value)
    cells = client.search_runs([experiment], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    assert {r.data.tags["partition_seed"] for r in cells} == {"0"}  # every cell says its split
