"""Which training seeds an ablation scores (ablation/seeds.py), and --seeds auto's arithmetic (cli/ablate.py)."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from raytune_fl.ablation.plan import AutoSeeds, make_plan
from raytune_fl.ablation.seeds import HELD_OUT, WITH_TUNING, held_out_seeds, seed_plan
from raytune_fl.ablation.sources import searched_seeds, variant_source
from raytune_fl.cli.ablate import auto_line, next_seed_count
from raytune_fl.cli.ablate import main as ablate
from raytune_fl.config import parse_space
from raytune_fl.tracking.store import StudyRecord, recorded_tuning_seeds
from tests.support import ablate_argv, tiny_space


def test_held_out_seeds_count_up_from_base_plus_one_skipping_every_searched_seed():
    assert held_out_seeds(0, 3, []) == [1, 2, 3]
    assert held_out_seeds(0, 3, [2]) == [1, 3, 4]
    assert held_out_seeds(5, 2, [6, 7, 9]) == [8, 10]
    assert held_out_seeds(5, 4, [3]) == [6, 7, 8, 9]  # a searched seed below the start changes nothing
    # prefix-stable: more seeds extend the first ones (--seeds auto adds seeds without moving those that ran)
    assert held_out_seeds(0, 6, [4])[:3] == held_out_seeds(0, 3, [4])


def test_the_seed_plan_holds_the_base_seed_out_by_default_and_keeps_it_only_when_asked():
    held = seed_plan(0, 3, [])
    assert held.rule == HELD_OUT and held.scored == (1, 2, 3) and held.searched == (0,) and held.overlap == ()
    assert "searched (tuning): 0" in held.describe() and "held out from the search): 1, 2, 3" in held.describe()
    kept = seed_plan(0, 3, [], include_tuning_seed=True)
    assert kept.rule == WITH_TUNING and kept.scored == (0, 1, 2) and kept.overlap == (0,)
    assert "including the tuning seed 0" in kept.describe() and "favours it" in kept.describe()
    # a study tuned at another seed (tune --seed 2): that one is held out too
    assert seed_plan(0, 3, [2]).scored == (1, 3, 4)


def test_a_study_records_its_tuning_seeds_and_older_studies_are_read_from_their_basis():
    assert recorded_tuning_seeds({"tuning_seeds": "7"}) == (7,)
    assert recorded_tuning_seeds({"tuning_seeds": "1,3"}) == (1, 3)
    assert recorded_tuning_seeds({"best_basis": "single trial, seed 4"}) == (4,)
    assert recorded_tuning_seeds({}) == ()


def test_the_plan_takes_every_studys_tuning_seeds_and_an_auto_plan_keeps_its_fingerprint_as_it_grows():
    s = parse_space(tiny_space())
    study = StudyRecord("run1", "univarfl", {"mu": 0.2}, {"best_val_acc": 0.5}, 0, tuning_seeds=(2,))
    sources = {"full": variant_source(s, "full", study), "fedavg": variant_source(s, "fedavg", None)}
    assert searched_seeds(sources) == {2}
    seeding = seed_plan(s.base.seed, 3, searched_seeds(sources))
    plan = make_plan(s, [], seeding, sources)
    assert sorted({c.seed for c in plan.cells}) == [1, 3, 4] and plan.seed_plan.searched == (0, 2)
    auto = AutoSeeds(2.0, 8, "fedavg")
    first = make_plan(s, [], seeding, sources, auto=auto)
    grown = first.with_seeds(seed_plan(s.base.seed, 5, searched_seeds(sources)))
    assert [c.seed for c in grown.cells if c.variant == "full"] == [1, 3, 4, 5, 6]
    assert grown.fingerprint == first.fingerprint != plan.fingerprint  # --resume finds the growing plan
    # the target and the cap are a stopping rule (a resume may change them); the reference is part of the plan
    narrower = AutoSeeds(1.0, 12, "fedavg")
    assert make_plan(s, [], seeding, sources, auto=narrower).fingerprint == (first.fingerprint)
    other = AutoSeeds(2.0, 8, "full")
    assert make_plan(s, [], seeding, sources, auto=other).fingerprint != (first.fingerprint)


def halfwidth(sd: float, n: int) -> float:
    return stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)


def test_auto_stops_on_the_width_or_the_cap_and_projects_the_next_round_at_most_doubling():
    auto = AutoSeeds(target_halfwidth=2.0, max_seeds=20, reference="fedavg")
    assert next_seed_count({"a at x": 1.9, "b at x": 2.0}, 3, auto) is None  # every width at most the target
    assert next_seed_count({"a at x": 9.0}, 20, auto) is None  # the cap
    # sd 2 points: 3 seeds give 4.97; the fewest n with t(n-1) * 2 / sqrt(n) <= 2 is 7, but a round at most doubles
    assert halfwidth(2.0, 3) == pytest.approx(4.968, abs=1e-3)
    assert next_seed_count({"a at x": halfwidth(2.0, 3)}, 3, auto) == 6
    assert halfwidth(2.0, 6) > 2.0 >= halfwidth(2.0, 7)
    assert next_seed_count({"a at x": halfwidth(2.0, 6)}, 6, auto) == 7
    assert next_seed_count({"a at x": halfwidth(2.0, 6)}, 6, AutoSeeds(2.0, 6, "fedavg")) is None
    assert next_seed_count({"a at x": math.inf}, 3, auto) == 6  # no interval yet: double
    assert next_seed_count({"a at x": halfwidth(2.0, 3)}, 3, AutoSeeds(2.0, 4, "fedavg")) == 4  # capped
    assert auto_line({"a at x": 1.5}, 3, auto, None).endswith("(a at x; 95 % interval), target 2: reached")
    assert "running 6 seeds" in auto_line({"a at x": 5.0}, 3, auto, 6)
    assert "not reached at --max-seeds 20" in auto_line({"a at x": 5.0}, 20, auto, None)


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--seeds", "many"], "argument --seeds: a whole number of seeds or 'auto'"),
        (["--seeds", "auto"], "--target-halfwidth: --seeds auto needs it"),
        (["--seeds", "auto", "--target-halfwidth", "2"], "--max-seeds: --seeds auto needs it"),
        (["--seeds", "auto", "--target-halfwidth", "0", "--max-seeds", "5"], "--target-halfwidth: a positive"),
        (["--seeds", "auto", "--target-halfwidth", "2", "--max-seeds", "2"], "--max-seeds: at least 3"),
        (["--seeds", "3", "--max-seeds", "5"], "--max-seeds: only with --seeds auto"),
        (
            ["--seeds", "auto", "--target-halfwidth", "2", "--max-seeds", "5", "--reference", "nope"],
            "--reference: 'nope' is not an ablated variant",
        ),
    ],
)
def test_bad_seed_options_name_the_option_and_write_nothing(tmp_path, capsys, extra, needle):
    argv = ablate_argv(tmp_path)
    code = None
    try:
        code = ablate([*argv, *extra])
    except SystemExit as stop:  # argparse's own refusal of a value
        code = stop.code
    assert code == 2
    err = capsys.readouterr().err
    assert needle in err.splitlines()[-1] and "Traceback" not in err
    assert not (tmp_path / "o").exists() and not (tmp_path / "m.db").exists()


# ---- a real --seeds auto ablation, in a store of its own (the shared store's tests read its newest ablation) ----


def test_seeds_auto_adds_seeds_until_the_requested_half_width_or_the_cap(ray_cluster, tmp_path, capsys):
    import re

    import pandas as pd
    import yaml
    from mlflow.tracking import MlflowClient

    space = tiny_space("auto_seeds", rounds=3, resources={"actors": 0})
    path = tmp_path / "auto_seeds.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    base = ["--space", str(path), "--mlflow-uri", uri, "--storage", str(tmp_path / "ray"), "--no-dashboard"]
    base += ["--out", str(tmp_path / "out"), "--seeds", "auto", "--reference", "fedavg"]
    # an unreachable target: 3 seeds, then one more round up to the cap, which it reports as not reached
    assert ablate([*base, "--target-halfwidth", "0.001", "--max-seeds", "4"]) == 0
    out = capsys.readouterr().out
    rounds = re.findall(
        r"seeds auto: (\d) seeds: widest half-width ([\d.]+) points \(full at default; 95 % interval\)", out
    )
    assert [n for n, _ in rounds] == ["3", "4"] and "running 4 seeds" in out and "not reached at --max-seeds 4" in out
    results = pd.read_parquet(tmp_path / "out" / "ablation_results.parquet")
    assert sorted(set(results["seed"])) == [1, 2, 3, 4] and len(results) == 8  # held out from base.seed 0
    # resumed with a reachable target, the width its 4 seeds gave: nothing more runs, and the target is reached
    target = float(rounds[-1][1]) + 0.01
    assert ablate([*base, "--target-halfwidth", f"{target}", "--max-seeds", "6", "--resume"]) == 0
    out = capsys.readouterr().out
    last = re.findall(r"seeds auto: (\d) seeds: widest half-width ([\d.]+) points", out)[-1]
    assert "8 of 8 runs had finished" in out and f"target {target:g}: reached" in out
    assert float(last[1]) <= target and last[0] == "4"
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("auto_seeds").experiment_id
    (parent,) = client.search_runs([experiment], "tags.stage = 'ablation' and tags.role = 'parent'")
    assert parent.data.tags["seeds"] == "1,2,3,4" and parent.data.params["seeds"] == "auto"
    assert parent.data.tags["seeds_auto"].startswith(
        f"interval half-width (level 1 - 0.05/m) <= {target:g} points against fedavg"
    )
