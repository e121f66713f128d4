"""The names of what a run reports are declared once, in raytune_fl/metrics/, and imported from there.

Every module under raytune_fl/, dashboards/ and scripts/ is parsed with `ast`; a string constant equal to one of
the declared names (a dict key, a default, an f-string's literal part or an expression inside it) fails, naming
the file, the line, the literal and the constant to import instead. A homonym that is not a metric (a checkpoint
key, a run tag, a word shown to the user) says so with `# not-a-metric` on its line.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from raytune_fl import metrics
from raytune_fl.metrics import round as round_module
from raytune_fl.metrics import study as study_module
from tests.support import REPO

SCANNED = ("raytune_fl", "dashboards", "scripts")
HOME = "raytune_fl/metrics/"  # the vocabulary's package: every module of it declares names
PRAGMA = "# not-a-metric"


def declared() -> dict[str, str]:
    """Every declared name -> the constant that holds it."""
    return {value: key for key, value in vars(metrics).items() if key.isupper() and isinstance(value, str)}


@dataclass(frozen=True)
class Restated:
    path: str
    line: int
    literal: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.literal!r} (metrics.{declared()[self.literal]})"


def restated(path: str, source: str, names: set[str]) -> list[Restated]:
    """The string constants of one module that are exactly one of `names`, outside lines marked `PRAGMA`."""
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source, filename=path)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
            span = lines[node.lineno - 1 : (node.end_lineno or node.lineno)]
            if not any(PRAGMA in line for line in span):
                found.append(Restated(path, node.lineno, node.value))
    return sorted(found, key=lambda r: (r.path, r.line, r.literal))


def scanned_files() -> list[Path]:
    return [p for top in SCANNED for p in sorted((REPO / top).rglob("*.py")) if "__pycache__" not in p.parts]


def test_no_module_restates_a_metric_name():
    names = set(declared())
    found = []
    for file in scanned_files():
        path = file.relative_to(REPO).as_posix()
        if not path.startswith(HOME):
            found += restated(path, file.read_text(encoding="utf-8"), names)
    assert not found, (
        f"{len(found)} metric names written as literals: import the constant from raytune_fl.metrics "
        f"(or mark a homonym that is no metric with {PRAGMA!r}):\n" + "\n".join(map(str, found))
    )


def test_the_scan_finds_a_name_in_any_form():
    source = '''
def f(result, name, metric="val_acc"):
    """Reads val_acc and test_acc: a sentence, not a name."""
    a = result["round"]
    b = f"{result.get('test_acc')}"
    c = f"sv_max{name}"
    d = {"round": 1}  # not-a-metric: a checkpoint's key
    return f"{name}_val_acc", "val_accuracy", result["clients_sampled"]
'''
    found = [(r.line, r.literal) for r in restated("x.py", source, set(declared()))]
    assert found == [(2, "val_acc"), (4, "round"), (5, "test_acc"), (6, "sv_max"), (8, "clients_sampled")]
    assert str(restated("x.py", source, {"round"})[0]) == "x.py:4: 'round' (metrics.ROUND)"


def test_the_scan_reads_the_package():
    """Guards against a scan that passes because it reads nothing: the vocabulary's own module holds every name."""
    paths = {f.relative_to(REPO).as_posix() for f in scanned_files()}
    assert {HOME + "round.py", "raytune_fl/engine/federation.py", "dashboards/build.py", "scripts/tune.py"} <= paths
    home = [
        r
        for p in sorted((REPO / HOME).glob("*.py"))
        for r in restated(HOME, p.read_text(encoding="utf-8"), set(declared()))
    ]
    assert {r.literal for r in home} == set(declared())


def test_every_name_is_declared_once_with_a_meaning():
    constants = [key for key, value in vars(metrics).items() if key.isupper() and isinstance(value, str)]
    assert len(constants) == len(declared()), "two constants hold the same name"
    assert set(metrics.MEANINGS) == set(declared()), "a name without a meaning, or a meaning of no name"
    in_groups = [name for group in metrics.GROUPS.values() for name in group]
    assert len(in_groups) == len(set(in_groups)), "a name in two groups"
    assert all(meaning.strip() for meaning in metrics.MEANINGS.values())


def test_the_vocabulary_imports_the_standard_library_only():
    code = (
        "import json, sys; before = set(sys.modules); import raytune_fl.metrics; "
        "print(json.dumps(sorted(m for m in set(sys.modules) - before if m.split('.')[0] not in "
        "sys.stdlib_module_names)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert loaded == ["raytune_fl", "raytune_fl.metrics", "raytune_fl.metrics.round", "raytune_fl.metrics.study"], (
        loaded
    )


def test_the_late_rounds_score_names_its_round_count():
    assert metrics.TEST_ACC_LAST_K == f"{metrics.TEST_ACC}_last{metrics.LAST_K}"


def test_round_names_and_study_names_are_apart():
    """A round's report carries the round names; the names the readers derive (a study's, an ablation's, the
    dashboard's) are never in it: the two modules share no name, and together they are the whole vocabulary."""
    round_names = {v for k, v in vars(round_module).items() if k.isupper() and isinstance(v, str)}
    study_names = {v for k, v in vars(study_module).items() if k.isupper() and isinstance(v, str)}
    assert round_names and study_names and not round_names & study_names
    assert round_names | study_names == set(declared())
    assert set(round_module.GROUPS).isdisjoint(study_module.GROUPS)
    assert {name for group in study_module.GROUPS.values() for name in group} == study_names
    assert metrics.TEST_ACC_LAST_K in study_names and metrics.BEST_PREFIX in study_names
    assert metrics.VAL_ACC in round_names and metrics.ROUND in round_names


def test_the_docs_metric_table_is_generated_from_the_meanings():
    """The docs' Metrics page (tools/docs_reference.py's `metrics` section) shows every declared name with its
    meaning, under its group, and the tutorial keeps no hand copy of the table."""
    from tools.docs_reference import cell, metric_label, metrics_reference

    page = metrics_reference()
    for group in metrics.GROUPS.values():
        for name, meaning in group.items():
            assert f"| {metric_label(name)} | {cell(meaning)} |" in page, name
    assert page.index("## What a round reports") < page.index("### Divergence") < page.index("## What the readers")
    assert "<!-- generated: metrics -->" in (REPO / "docs/reference/metrics.md").read_text(encoding="utf-8")
    tutorial = (REPO / "docs/tutorial/reading-results.md").read_text(encoding="utf-8")
    assert "| `val_acc`" not in tutorial and "reference/metrics.md" in tutorial
