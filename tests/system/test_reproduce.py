"""`scripts/reproduce.py NAME`: each paper table runs end to end with a shrunken round count and writes its results
page. (Space files and bad options: tests/cli/test_reproduce.py.)"""

from __future__ import annotations

import pandas as pd
import pytest

from raytune_fl.cli import reproduce
from raytune_fl.config import load_space
from raytune_fl.report import paper_protocols, results_page
from tools.dashboard_png import screenshot as dashboard_png

# one CPU a cell, two at once on the 2-core cluster (the tables run one 2-CPU cell or 2-actor trial at a time)
ONE_CPU_EACH = ["--set=base.resources.actors=0", "--set=base.resources.driver_cpus=1", "--set=tune.max_concurrent=2"]
SHRUNKEN = ["--num-samples=1", *ONE_CPU_EACH]
# 3 rounds: at 1 most runs end at chance (collapsed), and a page of collapsed runs judges nothing; privacy_central's
# 100 clients, half of them a round, are still at chance after 3 rounds (71 % after its 20); personalised_shards is
# also issue 61's real 5-round study (every personalising method's clients well above FedAvg's global model)
ROUNDS = {"privacy_central": 10, "personalised_shards": 5}
# the privacy tables at their own one alpha, to keep the slow tier's time (and privacy_central's 100 clients cannot
# all get 10 of its 4,000 samples at alpha 0.1); FedUV's, FedLD's and UniVarFL's tables at one alpha as well (a
# second alpha runs the same stages again), which pays for personalised_shards' 12 variants and the Slurm jobs
ALPHAS = {
    "privacy_budget": ("0.5",),
    "privacy_central": ("0.5",),
    "feduv_table4": ("0.1",),
    "fedld_table2": ("0.1",),
    "univarfl_paper": ("0.1",),
}
# 2 runs per cell: 2 training seeds on one split, or (univarfl_paper) 1 seed on 2 splits with its gradient norms
# (personalised_shards: 1, CI's time);
# univarfl_paper at 2 local epochs, not its protocol's 10 (the slowest table by far: 10 epochs x 28 cells)
RUNS_PER_CELL = {
    "univarfl_paper": ["--seeds=1", "--partition-seeds=2", "--set=base.local_epochs=2"],
    "personalised_shards": ["--seeds=1"],  # 12 variants x 5 rounds: its target holds in every run (asserted below)
}
# univarfl_comparison runs the same methods through the same code as univarfl_paper, and qffl_forms only fixed
# variants through the same stages: left out here to keep the slow tier's time (their space files are loaded and
# checked in tests/cli/test_reproduce.py; every committed page is regenerated in tests/report/test_results_pages.py);
# personalised runs personalised_shards' variants through the same stages, at alphas in place of the shards split
LEFT_OUT = ("univarfl_comparison", "qffl_forms", "personalised")
TABLES = [name for name in sorted(reproduce.PAPERS) if name not in LEFT_OUT]


@pytest.mark.parametrize("name", TABLES)
def test_each_table_reproduces_end_to_end_with_a_shrunken_round_count(name, ray_cluster, tmp_path, capsys):
    space = load_space(reproduce.PAPERS[name].space_file(name))
    screenshot = [] if name == "fedld_table2" else ["--no-screenshot"]  # one screenshot is enough to check it
    out, work = tmp_path / "results", tmp_path / "work"
    per_cell = RUNS_PER_CELL.get(name, ["--seeds=2", "--partition-seeds=1"])
    grid = reproduce.PAPERS[name].grid  # a table over another setting than alphas takes no --alphas
    alphas = ALPHAS.get(name, ("0.1", "0.5"))
    settings = [grid] if grid else [f"alpha={a}" for a in alphas]
    rounds = ROUNDS.get(name, 3)
    shrunken = [*SHRUNKEN, f"--rounds={rounds}", *([] if grid else [f"--alphas={','.join(alphas)}"]), *per_cell]
    argv = [name, *shrunken, *screenshot, "--out", str(out), "--work", str(work)]
    code = reproduce.main(argv, dashboard_png)
    assert code == 0, capsys.readouterr().err[-3000:]
    runs = pd.read_csv(out / name / "runs.csv")
    per_run = 1 if name == "personalised_shards" else 2  # seeds x splits
    assert len(runs) == len(space.variants) * per_run * len(settings)  # variants x (seeds x splits) x settings
    assert runs.groupby(["seed", "partition_seed"]).ngroups == per_run
    # a short run may end at chance: collapsed (it ran every round), never unfinished
    assert runs["status"].isin(["finished", "collapsed"]).all() and (runs["rounds_completed"] == rounds).all()
    assert (runs["status"] == "finished").any()
    assert set(runs["setting"]) == set(settings)
    page = (out / f"{name}.md").read_text()
    assert f"| variant | {' | '.join(settings)} |" in page
    searched = [v for v, spec in space.variants.items() if spec.search]
    for variant in space.variants:
        assert f"\n| {variant} | " in page  # a row in the table
    for variant in searched:  # its tuned values, read back from its study in MLflow
        line = next(s for s in page.splitlines() if s.startswith(f"| {variant} | {space.variants[variant].method} |"))
        assert "nothing searched" not in line and all(f"{k}=" in line for k in space.variants[variant].search)
    assert f"| variant − {reproduce.PAPERS[name].reference} |" in page
    # tune.py runs only for a table with something to search (the privacy tables fix every value)
    assert ("python scripts/tune.py" in page) == bool(searched) and "python scripts/ablate.py" in page
    assert "cores" in page and "torch" in page  # the machine
    # the page is the render of the files written beside it, and the index lists it with its verdicts
    record, written, grads = results_page.read(out / name)
    assert page == results_page.render(record, written, grads)
    assert f"({name}.md)" in (out / "README.md").read_text()
    # a shrunken run's collapsed runs leave some comparisons (or all) with too few pairs to judge: the page says so
    assert "(Holm-corrected)" in page or "too few runs to compare any variant with" in page
    assert ("## The paper's protocol and this run's" in page) == (name in paper_protocols.PAPERS)
    if (runs["status"] == "collapsed").any():
        assert "collapsed" in page
    if name == "personalised_shards":
        _clients_own_models_beat_the_global_one(space, runs, page)
    if name == "univarfl_paper":  # the splits vary, the comparison pairs them, and the gradient norms are read back
        assert "1 training seeds x 2 partition seeds (the split varies) per cell" in page
        assert "## Gradient norms" in page and "| univarfl_default | variance |" in page
    if not screenshot:
        assert (out / name / "dashboard.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({name}/dashboard.png)" in page


def _clients_own_models_beat_the_global_one(space, runs: pd.DataFrame, page: str) -> None:
    """2 classes per client, 5 rounds: every personalising variant's personal_val_acc (its clients' own models) is
    well above FedAvg's global val_acc, in every run; the table is personal_test_acc's, client_test_acc beside it."""
    from raytune_fl.config.space import personal_problem

    global_val = runs.loc[runs["variant"] == "fedavg", "val_acc"].max()
    personal = [name for name, v in space.variants.items() if not personal_problem(v, space.base)]
    assert len(personal) == 9  # the six, FedBN, FedPAC and FedAvg + fine-tuning
    # FedBN keeps only its BatchNorm per client: made for feature shift, it stays near the global model on label skew.
    # pFedMe's theta, K = 5 steps a batch pulled to w by lambda, stays near its global model in 5 rounds of 1 epoch
    # (its paper trains 20 local steps a round for 800 rounds): measured, not asserted (docs/results/
    # personalised_shards.md: 72.2 % against FedAvg's 72.4 % at 10 rounds)
    for name in (n for n in personal if n not in ("fedbn", "pfedme")):
        own = runs.loc[runs["variant"] == name, "personal_val_acc"]
        assert (own > global_val + 0.15).all(), (name, own.tolist(), global_val)
    assert "model each client uses on its own test part" in page and "global model on each client's own test" in page
