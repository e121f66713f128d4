"""The results pages are generated from their committed runs: every page in docs/results/ must be exactly what
report/results_page.py renders from its `<page>/page.yaml` and `<page>/runs.csv` with the current statistics code
(so no verdict stands that the runs and the code do not give), and the rendering is checked by hand on tiny runs."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest

from raytune_fl.metrics import CLIENT_ACC_P10, CLIENT_ACC_VAR, CLIENT_ACC_WORST, TEST_ACC
from raytune_fl.report import results_page
from raytune_fl.report.results_page import PageRecord
from tests.support import REPO
from tools import results_pages

RESULTS = REPO / "docs" / "results"


def test_every_committed_page_is_what_its_runs_give():
    stale = results_page.stale(RESULTS)
    assert not stale, f"regenerate with python -m tools.results_pages --write: {[p.name for p in stale]}"


def test_every_paper_table_with_a_committed_run_has_a_page_in_the_index():
    index = (RESULTS / "README.md").read_text()
    folders = results_page.page_folders(RESULTS)
    assert {f.name for f in folders} >= {"univarfl_paper", "univarfl_comparison", "feduv_table4", "fedld_table2"}
    for folder in folders:
        assert f"]({folder.name}.md)" in index
        assert (RESULTS / f"{folder.name}.md").read_text().startswith("# ")


def _record(**changes) -> PageRecord:
    record = PageRecord(
        name="tiny",
        title="A tiny table",
        reference="fedavg",
        shape="FedAvg and x.",
        generated="2026-11-28",
        commands=["python scripts/reproduce.py tiny"],
        machine="a test",
        commit="abc1234",
        wall_min={"tune": 1.0, "ablate": 2.0},
        space_file="tiny.yaml",
        protocol=["A tiny protocol."],
        run={"data": "digits"},
        tuned=[{"variant": "x", "method": "fedavg", "values": "nothing searched", "best_val_acc": "–"}],
        metrics=[TEST_ACC],
    )
    for key, value in changes.items():
        setattr(record, key, value)
    return record


def _runs(reference: list[float], other: list[float]) -> pd.DataFrame:
    rows = [
        {
            "variant": v,
            "method": "fedavg",
            "setting": "alpha=0.1",
            "seed": seed,
            "partition_seed": 0,
            "status": "finished",
            "rounds_completed": 10,
            TEST_ACC: value,
        }
        for v, values in (("fedavg", reference), ("x", other))
        for seed, value in enumerate(values)
    ]
    return pd.DataFrame(rows)


def test_a_page_states_the_verdict_its_runs_give_worked_by_hand():
    # per-seed differences 0.05, 0.06, 0.04: mean 0.05, sd 0.01, t = 0.05 / (0.01 / sqrt 3) = 8.660 on 2 degrees of
    # freedom, two-sided p = 0.01307; the 95 % interval 0.05 ± 4.3027 * 0.01 / sqrt 3 = [0.02516, 0.07484]. One
    # comparison: Holm's adjusted p is the raw p.
    page = results_page.render(_record(), _runs([0.50, 0.60, 0.70], [0.55, 0.66, 0.74]))
    # the MDD of a family of 1 at 3 pairs: t_{0.975, 2} / sqrt 3 = 2.484 standard deviations of 1 point
    sentence = (
        "- **Primary**: Final-round test accuracy, 1 comparison with fedavg (Holm-corrected): 1 resolved: x at "
        "alpha=0.1 above fedavg, +5.00 points, 95 % interval [+2.52, +7.48], adjusted p = 0.013. Minimum detectable "
        "difference at 3 pairs and a family of 1: 2.48 points (d_z >= 2.48)."
    )
    assert sentence in page
    assert "| x | **65.00 ± 9.54** |" in page  # mean and sample std of 0.55, 0.66, 0.74 in %
    assert "paired t p = 0.013, Holm p = 0.013" in page
    assert "## The paper's protocol" not in page  # no paper facts for a page that names no paper


def test_a_difference_inside_the_noise_is_called_so_with_the_closest_call():
    # differences +0.10, -0.08, +0.01: mean 0.01, inside any interval
    page = results_page.render(_record(), _runs([0.50, 0.60, 0.70], [0.60, 0.52, 0.71]))
    assert (
        "1 comparison with fedavg (Holm-corrected): no difference is resolved; the closest is x at alpha=0.1, +1.00 "
        "points, not resolved: 95 % interval [" in page
    )
    assert "inside" not in page


def test_a_metric_the_runs_lack_is_named_not_judged():
    page = results_page.render(_record(metrics=[TEST_ACC, "test_acc_last5"]), _runs([0.5, 0.6], [0.55, 0.66]))
    assert "Not measured by these runs (their files predate it): mean test accuracy of the last 5 rounds." in page
    assert "## Mean test accuracy of the last 5 rounds" not in page


def test_a_changed_run_makes_its_page_stale_until_regenerated(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(RESULTS / "feduv_table4", results / "feduv_table4")
    shutil.copy(RESULTS / "feduv_table4.md", results / "feduv_table4.md")
    shutil.copy(RESULTS / "README.md", results / "README.md")
    results_page.write(results)  # the index of this one-page folder
    assert results_pages.main(["--check", "--results", str(results)]) == 0
    runs = pd.read_csv(results / "feduv_table4" / "runs.csv")
    runs.loc[runs["variant"] == "full", TEST_ACC] -= 0.05  # five points off the full method's runs
    runs.to_csv(results / "feduv_table4" / "runs.csv", index=False)
    assert results_pages.main(["--check", "--results", str(results)]) == 1
    assert {p.name for p in results_page.stale(results)} == {"feduv_table4.md", "README.md"}
    assert results_pages.main(["--write", "--results", str(results)]) == 0
    assert not results_page.stale(results)


@pytest.mark.parametrize("folder", results_page.page_folders(RESULTS), ids=lambda f: f.name)
def test_each_record_names_a_space_file_and_commands_that_exist(folder):
    record = PageRecord.load(folder)
    assert (REPO / record.space_file).is_file()
    assert record.commands[0] == f"python scripts/reproduce.py {record.name}"
    assert record.generated[:4] == "2026" and record.commit


def _fair_runs() -> pd.DataFrame:
    """x is 2 points below fedavg on test accuracy in every seed, y 2 above; both have a smaller client variance."""
    rows = []
    for seed in range(3):
        base = 0.70 + 0.05 * seed
        for variant, acc, var in (
            ("fedavg", base, 0.02 + 0.001 * seed),
            ("x", base - 0.02, 0.01),
            ("y", base + 0.02, 0.01),
        ):
            rows.append(
                {"variant": variant, "method": "fedavg", "setting": "alpha=0.1", "seed": seed, "partition_seed": 0,
                 "status": "finished", "rounds_completed": 10, TEST_ACC: acc, CLIENT_ACC_VAR: var,
                 CLIENT_ACC_P10: acc - 0.1, CLIENT_ACC_WORST: acc - 0.2}
            )  # fmt: skip
    return pd.DataFrame(rows)


def test_a_smaller_spread_is_called_fairer_only_where_test_accuracy_is_not_below_the_reference():
    record = _record(
        metrics=[TEST_ACC, CLIENT_ACC_P10, CLIENT_ACC_VAR],
        held_out={"train_images": 1437, "val_fraction": 0.2, "clients": 10},
    )
    page = results_page.render(record, _fair_runs())
    # variance: fedavg 0.020, 0.021, 0.022 against 0.01: -1.1 points² on average for both x and y, zero spread in the
    # pairs' differences (-0.010, -0.011, -0.012 have sd 0.001) so both are called
    assert "y at alpha=0.1 below fedavg, -110.0 points²" in page and "(fairer)" in page
    assert "x at alpha=0.1 below fedavg, -110.0 points²" in page
    assert "(a smaller spread, not called fairer, at -2.00 points of test accuracy)" in page
    assert page.count("(fairer)") == 1
    # the 10th percentile's honest label; secondary, after the primary
    assert "Secondary: 10th percentile of client accuracy (numpy interpolation, final round)" in page
    assert page.index("- **Primary**: Final-round") < page.index("- Secondary: 10th percentile")
    assert "Primary endpoint: final-round test accuracy against fedavg." in page
    # 1,437 x 20 % / 10 = 28.74 images per client on average; one image is 100 / 28.74 = 3.5 points
    assert "on average 29 images (1,437 training images x 20% / 10 clients). That is an average" in page
    assert "one image is 3.5 points" in page


def test_runs_at_chance_are_collapsed_out_of_the_statistics_and_counted_in_their_cell():
    # bound 0.20: fedavg's seed-2 run at 0.15 is at chance; its pair leaves, 2 pairs remain
    runs = _runs([0.50, 0.60, 0.15], [0.55, 0.66, 0.74])
    page = results_page.render(_record(chance_bound=0.20), runs)
    assert "| fedavg | 55.00 ± 7.07 (3 runs, 1 collapsed) |" in page  # mean and sd of 0.50, 0.60
    assert "Collapsed runs: 1 of 6 ended at chance, a final test accuracy at or under 20.00 %" in page
    assert "Collapsed runs are out of the statistics (1 of 6)." in page
    assert "n = 2)" in page  # the comparison over the 2 remaining pairs
    classified = results_page.classify(_record(chance_bound=0.20), runs)
    assert list(classified["status"]).count("collapsed") == 1
    assert results_page.classify(_record(), runs) is runs  # no bound: the status alone


def _reference_runs() -> pd.DataFrame:
    """fedavg is the primary reference, b a further one; against b, x is +5 points in every seed pair (+0.05, +0.06,
    +0.04), w -5 (-0.05, -0.06, -0.04), z +1 (+0.10, -0.08, +0.01); y is no contender."""
    values = {
        "fedavg": [0.40, 0.45, 0.50],
        "b": [0.50, 0.60, 0.70],
        "x": [0.55, 0.66, 0.74],
        "w": [0.45, 0.54, 0.66],
        "z": [0.60, 0.52, 0.71],
        "y": [0.90, 0.90, 0.90],
    }
    rows = [
        {"variant": v, "method": "fedavg", "setting": "alpha=0.1", "seed": seed, "partition_seed": 0,
         "status": "finished", "rounds_completed": 10, TEST_ACC: value}
        for v, seeds in values.items()
        for seed, value in enumerate(seeds)
    ]  # fmt: skip
    return pd.DataFrame(rows)


def test_each_further_reference_is_one_family_of_the_contenders_with_a_sentence_per_comparison():
    record = _record(references=["fedavg", "b"], contenders=["x", "w", "z"])
    page = results_page.render(record, _reference_runs())
    # x and w: t = 0.05 / (0.01 / sqrt 3) = 8.660 on 2 degrees of freedom, raw p = 0.01307 each; z: mean 0.01, sd
    # 0.09, t = 0.1925, p = 1 - t / sqrt(2 + t²) = 0.8652. Holm over the 3: 3 x 0.01307 = 0.039 for both (the
    # second's 2 x 0.01307 is raised to the first's), z 0.8652 stays. 2 called of 3: the intervals at
    # 1 - 0.05 / (3 - 2) = 95 %: 0.05 ± 4.3027 x 0.01 / sqrt 3 = [2.52, 7.48] points; z 0.01 ± 4.3027 x 0.09 / sqrt 3
    # = [-21.36, +23.36]. Sign-flip p: x and w 2 / 8 = 0.25 (every difference one sign); z: |sum| >= 0.03 for 6 of
    # the 8 sign vectors, 0.75. The minimum detectable difference of 3 pairs in a family of 3.
    bullet = (
        "- **Primary**, a further reference: Final-round test accuracy against b, 3 comparisons (Holm-corrected): "
        "x at alpha=0.1: resolved above b, +5.00 points, 95 % interval [+2.52, +7.48], adjusted p = 0.039, "
        "sign-flip p = 0.25; w at alpha=0.1: resolved below b, -5.00 points, 95 % interval [-7.48, -2.52], "
        "adjusted p = 0.039, sign-flip p = 0.25; z at alpha=0.1: not resolved against b, +1.00 points, 95 % "
        "interval [-21.36, +23.36], adjusted p = 0.87, sign-flip p = 0.75. Minimum detectable difference at 3 pairs "
        "and a family of 3:"
    )
    assert bullet in page
    assert "y at alpha=0.1: " not in page  # not a contender: compared with the primary reference only
    assert "| variant − b | alpha=0.1 |" in page and "### Against b (the contenders only)" in page
    assert "p-values adjusted for 3 comparisons by Holm's" in page  # the table's footnote: its own family
    # the primary family is unchanged: every variant but fedavg against fedavg, 5 comparisons
    assert "- **Primary**: Final-round test accuracy, 5 comparisons with fedavg (Holm-corrected)" in page
    assert "The paper's other baselines, b, are compared on the same endpoint with x, w and z only" in page
    # the primary bullet first, then the further reference's, as in the index
    assert page.index("- **Primary**: Final") < page.index("- **Primary**, a further reference")
    index = results_page.render_index([(record, _reference_runs())])
    assert bullet in index


def test_without_contenders_every_variant_that_is_no_reference_is_compared_with_a_further_reference():
    record = _record(references=["fedavg", "b"])
    page = results_page.render(record, _reference_runs())
    assert "Final-round test accuracy against b, 4 comparisons (Holm-corrected)" in page  # x, w, z and y
    assert "y at alpha=0.1: " in page
    assert "fedavg at alpha=0.1: " not in page  # a reference is no contender


def test_a_page_with_one_reference_has_no_further_reference():
    page = results_page.render(_record(), _reference_runs())
    assert "a further reference" not in page and "The paper's other baselines" not in page
    assert "### Against fedavg" in page and "(the contenders only)" not in page


def test_the_references_start_with_the_primary_one_and_hold_no_contender():
    with pytest.raises(ValueError, match="references: the first must be the primary reference 'fedavg'"):
        _record(references=["b", "fedavg"]).__post_init__()
    with pytest.raises(ValueError, match="contenders: a reference cannot be a contender"):
        _record(references=["fedavg", "b"], contenders=["b"]).__post_init__()
    assert _record(references=["fedavg", "b", "b"]).further_references == ["b"]


def test_the_protocol_table_states_the_papers_facts_and_what_the_run_stands_in_for():
    run = {"model": "simple_cnn", "clients": "10", "rounds": "20", "local epochs": "E = 1"}  # not-a-metric: rows
    page = results_page.render(_record(name="feduv_table4", run=run), _reference_runs())
    assert "| rounds | 100 (official code's default) | 20 |" in page
    assert "| local epochs | E = 10 (official code's default) | E = 1 |" in page
    assert "| label skew | Dirichlet α (0.01 the official code's default) | – |" in page  # the run did not say
    # Freeze is a row of the paper's Table 4, not something the project adds
    assert "| compared | FedAvg, Freeze (a never-trained classifier: 23.7 on STL-10)" in page
    assert "the project adds" not in page
    assert (
        "This run's model, clients and rounds stand in for the paper's, scaled to the project's small data: "
        "simple_cnn here (the paper: simple-cnn (official code's default, with ResNet-18 and ResNet-50 as options)); "
        "10 clients here against the paper's 10 (official code's default); 20 rounds here against the paper's 100 "
        "(official code's default)."
    ) in page
    univarfl = results_page.render(_record(name="univarfl_paper", run=run), _reference_runs())
    assert "| model | not checked here | simple_cnn |" in univarfl
    assert "20 rounds here (the paper: not checked here)." in univarfl
    assert "the paper's adverse cell on STL-10 (UniVarFL below FedAvg at α = 1.0; on CIFAR-100 it is above" in univarfl
