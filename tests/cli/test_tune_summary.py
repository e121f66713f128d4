"""tune.py's closing summary: each variant's best validation accuracy with its binomial standard error over the
validation set, the set's size said once, and the variants a single trial per variant cannot rank flagged."""

from __future__ import annotations

import argparse
import dataclasses

from raytune_fl.cli.tune import print_next_steps, print_summary
from raytune_fl.config import TuneSettings
from raytune_fl.tune.outcome import VariantOutcome

URI = "sqlite:////tmp/m.db"


def _outcome(variant: str, val_acc: float, test_acc: float = 0.5, val_loss: float = 1.0) -> VariantOutcome:
    metrics = {"val_acc": val_acc, "val_loss": val_loss, "test_acc": test_acc, "round": 4.0}
    return VariantOutcome(variant, variant, {}, metrics, {"finished": 1}, None, "", 8.0, val_samples=400)


OPTIMISM = (
    "Each variant's best val_acc is the maximum over its study's trials, so it is optimistic (biased upwards, the more "
    "so the more trials); the ± treats the variants as independent although all are scored on the same validation "
    "images, so comparing variants here is only indicative: the ablation over seeds on the test set is what ranks them."
)


def _summary(capsys, outcomes: list[VariantOutcome], **options) -> list[str]:
    """The summary's lines after its heading and the caveat about best-of-trials scores (said once, first, whenever
    a variant has a score)."""
    print_summary(outcomes, URI, "quickstart", 60.0, **options)
    printed = capsys.readouterr().out
    lines = printed.split("===\n", 1)[1].split("\ntotal wall time", 1)[0].splitlines()
    if any(o.best_metrics for o in outcomes):
        caveat, *lines = lines
        assert caveat.startswith("Each variant's best ") and sum(line.startswith("Each variant") for line in lines) == 0
    return lines


def test_the_best_of_trials_caveat_is_said_once_per_summary(capsys):
    per_setting = [
        dataclasses.replace(_outcome(v, acc), setting=s)
        for s in ("alpha=0.1", "alpha=1.0")
        for v, acc in (("feduv", 0.7), ("fedavg", 0.6))
    ]
    print_summary(per_setting, URI, "quickstart", 60.0)
    printed = capsys.readouterr().out
    assert printed.count("Each variant's best") == 1 and f"===\n{OPTIMISM}\n" in printed
    # a loss has no ± to qualify and is not "upwards"
    print_summary(
        [_outcome("a", 0.5), _outcome("b", 0.6)], URI, "quickstart", 60.0, tune=TuneSettings(metric="val_loss")
    )
    loss = capsys.readouterr().out
    assert (
        "Each variant's best val_loss is the best over its study's trials, so it is optimistic (biased towards a "
        "better score, the more so the more trials); comparing variants here is only indicative: the ablation over "
        "seeds on the test set is what ranks them.\n"
    ) in loss
    failed = VariantOutcome("moon", "moon", {}, {}, {"error": 3}, None, "", 1.0, ["boom"])
    print_summary([failed], URI, "quickstart", 60.0)
    assert "Each variant's best" not in capsys.readouterr().out  # no score, nothing to qualify


def test_each_accuracy_has_its_standard_error_and_the_set_size_is_said_once(capsys):
    # SE at n = 400: sqrt(0.718 * 0.282 / 400) = 0.0225, sqrt(0.53 * 0.47 / 400) = 0.0250
    lines = _summary(capsys, [_outcome("feduv", 0.718, 0.701), _outcome("fedavg", 0.53)])
    assert lines[0] == (
        "val_acc: one trial, one seed per variant, on 400 validation images (all clients' held-out parts); "
        "± is one binomial standard error (SE), sqrt(p(1-p)/400)"
    )
    assert lines[1].startswith("           feduv: val_acc 71.8 % ± 2.2  test_acc 70.1 % (round 4) [no hyperparameters]")
    assert lines[2].startswith("          fedavg: val_acc 53.0 % ± 2.5  test_acc 50.0 % (round 4)")
    assert sum("400" in line for line in lines) == 1
    # 0.188 apart, beyond 2 * sqrt(0.0225^2 + 0.0250^2) = 0.067
    assert lines[3].startswith("feduv leads the others by more than 2 standard errors")


def test_variants_within_two_standard_errors_of_the_best_are_flagged(capsys):
    # feduv 0.718 (SE 0.0225); fedprox 0.700 (0.0229) and moon 0.680 (0.0233) are 0.018 and 0.038 below it,
    # inside 2 * sqrt(SE^2 + 0.0225^2) = 0.064 and 0.065; fedavg 0.530 (0.0250) is 0.188 below, outside 0.067
    outcomes = [_outcome("fedprox", 0.70), _outcome("feduv", 0.718), _outcome("moon", 0.68), _outcome("fedavg", 0.53)]
    lines = _summary(capsys, outcomes)
    assert lines[-1] == (
        "fedprox and moon are within 2 standard errors of feduv: one trial and seed each cannot rank them; "
        'the ablation in "next" below ranks them over seeds (x settings with --grid)'
    )
    assert "fedavg is within" not in "\n".join(lines)


def test_the_drivers_count_wins_and_a_loss_has_no_standard_error(capsys):
    lines = _summary(capsys, [_outcome("a", 0.5), _outcome("b", 0.6)], val_samples=100)  # SE 5.0 and 4.9
    assert "on 100 validation images" in lines[0] and "val_acc 50.0 % ± 5.0" in lines[1]
    assert lines[-1] == (
        "a is within 2 standard errors of b: one trial and seed each cannot rank them; "
        'the ablation in "next" below ranks them over seeds (x settings with --grid)'
    )
    lines = _summary(
        capsys, [_outcome("a", 0.5, val_loss=0.8123), _outcome("b", 0.6)], tune=TuneSettings(metric="val_loss")
    )
    assert lines[0].startswith("val_loss: one trial, one seed per variant; no standard error computed")
    assert lines[1].startswith("               a: val_loss=0.8123  test_acc=0.5000 (round 4)")
    assert len(lines) == 3 and "±" not in "\n".join(lines)  # no SE, no flag


def test_a_failed_variant_is_left_out_of_the_ranking(capsys):
    failed = VariantOutcome("moon", "moon", {}, {}, {"error": 3}, None, "", 1.0, ["boom"])
    lines = _summary(capsys, [_outcome("fedavg", 0.53), failed])
    assert lines[2].startswith("            moon: no successful trial")
    assert len(lines) == 3  # one scored variant: nothing to rank


def test_the_next_block_says_the_ablation_ranks_the_variants(capsys):
    args = argparse.Namespace(space="search_spaces/quickstart.yaml", mlflow_uri=None)
    print_next_steps(args, URI, "quickstart", "1", [_outcome("fedavg", 0.53)])
    printed = capsys.readouterr().out
    assert "ablate the selected configurations over seeds (what ranks the variants):  " in printed
    assert "ablate.py --space search_spaces/quickstart.yaml --seeds 3\n" in printed  # as started: a script


def test_without_the_validation_sets_size_no_standard_error_is_shown(capsys):
    metrics = {"val_acc": 0.53, "test_acc": 0.54, "round": 4.0}
    unknown = VariantOutcome("fedavg", "fedavg", {}, metrics, {}, None, "", 8.0)  # val_samples None
    lines = _summary(capsys, [unknown])
    assert lines[0].endswith("no standard error (the validation set's size is unknown)")
    assert lines[1].startswith("          fedavg: val_acc=0.5300  test_acc=0.5400 (round 4)")


def test_the_trial_counts_show_collapsed_in_their_order_even_for_a_study_recorded_before_it(capsys):
    counts = {"finished": 2, "collapsed": 1, "stopped_early": 0, "diverged": 0, "error": 0}
    now = dataclasses.replace(_outcome("fedavg", 0.6), trials=counts)
    before = dataclasses.replace(_outcome("feduv", 0.7), trials={"error": 1, "finished": 3})  # an older manifest's
    lines = _summary(capsys, [now, before])
    assert "trials {'finished': 2, 'collapsed': 1, 'stopped_early': 0, 'diverged': 0, 'error': 0} 8s" in lines[1]
    assert "trials {'finished': 3, 'collapsed': 0, 'stopped_early': 0, 'diverged': 0, 'error': 1} 8s" in lines[2]
