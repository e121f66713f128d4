"""tools/readme_samples.py: the README's and the tutorial's sample output is cut from the recorded quick start
(tools/samples/quickstart.txt), never copied by hand. A real run is compared with the record in
tests/system/test_quickstart.py."""

from __future__ import annotations

import re

from raytune_fl.config import load_space
from tests.support import REPO
from tools import readme_samples

TRANSCRIPT = """# raytune-fl tune --space search_spaces/quickstart.yaml: recorded 2026-01-01 by ...
data: 10 clients, 4000 train samples (400 held out for validation), 1000 test samples
[a] done: 1/1 trials ended (1 finished) | max val_acc=0.5250 (trial 1 round 4) | 5s
  saving the selected model to MLflow...

=== best configuration per variant (selected on validation; test reported beside) ===
val_acc: one trial, one seed per variant, on 400 validation images
               a: val_acc 52.5 % ± 2.5  test_acc 53.9 % (round 4) [no hyperparameters] trials {'finished': 1} 5s
               b: val_acc 49.0 % ± 2.5  test_acc 50.3 % (round 4) [mu=0.0112, lambda=8.47] trials {'finished': 3} 6s

total wall time: 11s
MLflow: experiment 'quickstart' at sqlite:///$PWD/mlflow.db
  a: parent run 1107ce01, best model models:/m-b3e3

=== next ===
  ablate the selected configurations over seeds (what ranks the variants):  raytune-fl ablate --space s.yaml --seeds 3

"""


def test_the_views_cut_the_run_and_the_summary_from_a_transcript():
    assert readme_samples.view("run", TRANSCRIPT).splitlines() == [
        "```text",
        "data: 10 clients, 4000 train samples (400 held out for validation), 1000 test samples",
        "[a] done: 1/1 trials ended (1 finished) | max val_acc=0.5250 (trial 1 round 4) | 5s",
        "  saving the selected model to MLflow...",
        "```",
    ]
    summary = readme_samples.view("summary", TRANSCRIPT).splitlines()
    assert summary[1].startswith("=== best configuration per variant") and summary[6] == "total wall time: 11s"
    assert summary[5] == "" and summary[7:] == [  # the store's listing between them left out
        "...",
        "=== next ===",
        "  ablate the selected configurations over seeds (what ranks the variants):  raytune-fl ablate --space s.yaml "
        "--seeds 3",
        "```",
    ]
    assert readme_samples.selected(TRANSCRIPT) == {
        "a": (52.5, 2.5, "no hyperparameters"),
        "b": (49.0, 2.5, "mu=0.0112, lambda=8.47"),
    }


def test_a_block_between_its_markers_is_rewritten_and_the_rest_kept():
    page = "intro\n<!-- sample: run (how) -->\n```text\nold\n```\n<!-- /sample -->\noutro\n"
    written = readme_samples.rewritten(page, TRANSCRIPT)
    assert written == page.replace("```text\nold\n```\n", readme_samples.view("run", TRANSCRIPT))
    assert readme_samples.rewritten(written, TRANSCRIPT) == written


def test_the_readme_and_the_tutorial_show_the_recorded_quick_start():
    """Stale: `python -m tools.readme_samples --write` (after `--record` when the quick start's output changed)."""
    text = readme_samples.TRANSCRIPT.read_text()
    shown = {}
    for page in readme_samples.PAGES:
        content = page.read_text()
        assert readme_samples.rewritten(content, text) == content, f"{page.name} is stale"
        shown[page.name] = re.findall(r"<!-- sample: (\w+)", content)
    assert shown == {"README.md": ["summary"], "first-study.md": ["run", "summary"]}


def test_the_record_is_a_whole_run_of_the_readmes_quick_start():
    text = readme_samples.TRANSCRIPT.read_text()
    assert text.startswith("# raytune-fl tune --space search_spaces/quickstart.yaml: recorded ")
    readme = (REPO / "README.md").read_text()
    assert "raytune-fl tune --space search_spaces/quickstart.yaml" in readme.split("## Quick start", 1)[1]
    space = load_space(REPO / readme_samples.SPACE)
    assert set(readme_samples.selected(text)) == set(space.variants)
    for variant in space.variants:  # every phase of the run is in it, said as the code says it now
        assert f"=== variant {variant} (method {space.variants[variant].method}) ===" in text
        assert f"[{variant}] starting trial 1/" in text and f"[{variant}] done: " in text
    assert text.count("  saving the selected model to MLflow...\n") == len(space.variants)
    assert "starting Ray (a private local cluster)..." in text and "/tmp/" not in text  # its folder is $PWD
    next_block = text.split("=== next ===\n", 1)[1]
    assert "raytune-fl ablate --space search_spaces/quickstart.yaml --seeds 3" in next_block
