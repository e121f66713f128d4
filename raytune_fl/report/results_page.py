"""A results page, `docs/results/<name>.md`, made only from the files committed beside it in `<name>/`:

- `page.yaml`: what the run was (title, protocol, tuned values, commands, machine, commit, date, wall time, notes);
- `runs.csv`: one row per run with its final-round scores (and, since they exist, the mean of the last rounds and
  the client spread);
- `gradients.csv` (optional): the gradient-norm probe's rounds.

`render` turns them into the page, every table and every sentence that states a verdict included, so a page is
never edited by hand: `python -m tools.results_pages --write` regenerates all of them and `--check` (run by the
tests) fails on any difference. `export` writes the three files from a finished `reproduce.py` run. The index,
`docs/results/README.md`, is rendered from the same files (`render_index`).
"""

from __future__ import annotations

import math
import posixpath
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd
import yaml

from raytune_fl.ablation.table import markdown_rows, noise, summarise, wide
from raytune_fl.engine.metric_names import (
    CLIENT_ACC_P10,
    CLIENT_ACC_VAR,
    CLIENT_ACC_WORST,
    LAST_K,
    TEST_ACC,
    TEST_ACC_LAST_K,
)
from raytune_fl.report import comparison, gradients
from raytune_fl.report.paper_protocols import ASPECTS, PAPERS

PAGE_FILE = "page.yaml"
RUNS_FILE = "runs.csv"
GRADIENTS_FILE = "gradients.csv"
TABLE_FILE = "table.csv"
INDEX_FILE = "README.md"
# the pages live in docs/results/: their link to the statistics explanation, relative to there
STATISTICS_LINK = posixpath.relpath("docs/explanation/statistics.md", "docs/results")


@dataclass(frozen=True)
class Metric:
    label: str  # how the page names it
    scale: float = 100.0  # shown x scale: accuracy in % and differences in points
    unit: str = "points"
    digits: int = 2
    higher_is_better: bool = True


METRICS: dict[str, Metric] = {
    TEST_ACC: Metric("final-round test accuracy"),
    TEST_ACC_LAST_K: Metric(f"mean test accuracy of the last {LAST_K} rounds"),
    CLIENT_ACC_WORST: Metric("worst client's accuracy (final round)"),
    CLIENT_ACC_P10: Metric("10th-percentile client accuracy (final round)"),
    # a variance of accuracies: in points² (x 10,000); lower is fairer
    CLIENT_ACC_VAR: Metric("variance of accuracy over clients (final round)", 1e4, "points²", 1, False),
}
# what a page compares unless its page.yaml says otherwise: final round, then the last rounds where the runs have them
DEFAULT_METRICS = (TEST_ACC, TEST_ACC_LAST_K)


@dataclass
class PageRecord:
    """page.yaml: everything on the page that is not computed from runs.csv."""

    name: str
    title: str
    reference: str
    shape: str
    generated: str  # ISO date of the run
    commands: list[str]  # the reproduce line first, then what it ran
    machine: str
    commit: str
    wall_min: dict[str, float]  # tune and ablate minutes
    space_file: str
    protocol: list[str]  # the space file's header, the run's own description
    run: dict[str, str]  # aspect (paper_protocols.ASPECTS) -> what this run did
    tuned: list[dict[str, str]]  # rows: variant, method, values, best_val_acc (a string, '–' when nothing searched)
    metrics: list[str] = field(default_factory=lambda: list(DEFAULT_METRICS))
    correction: str = comparison.DEFAULT_CORRECTION
    notes: list[str] = field(default_factory=list)  # caveats; never a verdict (those are computed)
    dashboard: str | None = None  # the screenshot's file name in the page's folder

    @classmethod
    def load(cls, folder: Path) -> PageRecord:
        return cls(**yaml.safe_load((folder / PAGE_FILE).read_text()))

    def dump(self, folder: Path) -> Path:
        path = folder / PAGE_FILE
        path.write_text(yaml.safe_dump(asdict(self), sort_keys=False, allow_unicode=True, width=120))
        return path


# ---------------------------------------------------------------- the numbers


def metrics_present(record: PageRecord, runs: pd.DataFrame) -> list[str]:
    """The page's metrics the runs have values for (runs made before a column existed lack it)."""
    return [m for m in record.metrics if m in runs and runs[m].notna().any()]


def family(record: PageRecord, runs: pd.DataFrame, metric: str) -> list[comparison.Difference]:
    """Every variant x setting against the reference on one metric: one family, corrected together."""
    return comparison.differences(runs, record.reference, metric=metric, correction=record.correction)


def _direction(d: comparison.Difference, metric: Metric) -> str:
    """For a metric where lower is better (the variance over clients), which way the difference points."""
    if metric.higher_is_better:
        return ""  # 'above' and 'below' say it for an accuracy
    return " (fairer)" if d.delta < 0 else " (less fair)"


def verdict_sentence(found: list[comparison.Difference], metric_name: str, reference: str) -> str:
    """The one sentence a page (and the index) says about a family: which differences survive the correction."""
    metric = METRICS[metric_name]
    judged = [d for d in found if not math.isnan(d.p_value)]
    if not judged:
        return f"{metric.label.capitalize()}: too few runs to compare any variant with {reference}."
    how = comparison.CORRECTION_NAMES.get(judged[0].correction, judged[0].correction)
    head = f"{metric.label.capitalize()}, {len(judged)} comparison{'s' if len(judged) != 1 else ''} with {reference}"
    head += "" if judged[0].correction == "none" else f" ({how}-corrected)"
    found_sig = [d for d in judged if d.significant]
    if not found_sig:
        best = min(judged, key=lambda d: d.p_value)  # the closest call, by its raw p
        return (
            f"{head}: none is significant; the closest is {best.variant} at {best.setting}, {_effect(best, metric)}, "
            f"raw p = {best.p_value:.2g}, adjusted p = {best.verdict_p:.2g}."
        )
    listed = "; ".join(
        f"{d.variant} at {d.setting} {'above' if d.delta > 0 else 'below'} {reference}, "
        f"{_effect(d, metric)}, adjusted p = {d.verdict_p:.2g}"
        f"{_direction(d, metric)}"
        for d in found_sig
    )
    rest = len(judged) - len(found_sig)
    others = f" The other {rest} {'is' if rest == 1 else 'are'} inside the noise." if rest else ""
    return f"{head}: {len(found_sig)} significant: {listed}.{others}"


def _effect(d: comparison.Difference, metric: Metric) -> str:
    f = f"+.{metric.digits}f"
    return f"{d.delta * metric.scale:{f}} {metric.unit} [{d.ci_low * metric.scale:{f}}, {d.ci_high * metric.scale:{f}}]"


def table_markdown(runs: pd.DataFrame, metric_name: str, seeds: int, splits: int) -> str:
    """Variants down, settings across: mean ± sample std of the metric, the best of each column in bold."""
    metric = METRICS[metric_name]
    bounded = metric.unit == "points"  # accuracies stay in [0, 1]; a variance has no such bound here
    summary = summarise(
        runs, metric=metric_name, bounds=(0.0, 1.0) if bounded else None, lower_is_better=not metric.higher_is_better
    )
    shown = summary.assign(mean=summary["mean"] * metric.scale / 100, std=summary["std"] * metric.scale / 100)
    lines = markdown_rows(wide(shown))
    unit = "%" if bounded else metric.unit
    best = "best" if metric.higher_is_better else "lowest"
    lines += [
        "",
        f"Cells: {metric.label} in {unit}, mean ± sample std (ddof=1) over {noise(seeds, splits)}; **bold** = {best} "
        "in its column; (n/runs) = only n runs finished (diverged or failed runs are not averaged in).",
    ]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- the page


def render(record: PageRecord, runs: pd.DataFrame, grads: pd.DataFrame | None = None) -> str:
    """The whole page from its record and runs (and gradient rounds): deterministic, nothing read from a store."""
    seeds = runs["seed"].nunique()
    splits = runs["partition_seed"].nunique() if "partition_seed" in runs else 1
    rounds = int(runs["rounds_completed"].max())
    wall = record.wall_min
    lines = [
        f"# {record.title}",
        "",
        "<!-- Generated from the files in " + f"{record.name}/ by `python -m tools.results_pages --write`; do not "
        "edit by hand. -->",
        "",
        f"Run {record.generated} (tuning {wall.get('tune', 0):.0f} min, ablation {wall.get('ablate', 0):.0f} min); "
        f"made again by `{record.commands[0]}`.",
        "",
        f"Machine: {record.machine}." + (f" Code: commit {record.commit}." if record.commit else ""),
        "",
    ]
    lines += [f"> **Note.** {note}\n" for note in record.notes]
    lines += [f"Variants: {record.shape}", ""]
    lines += protocol_section(record)
    lines += [
        "## The run",
        "",
        *(f"> {line}" if line else ">" for line in record.protocol),
        "",
        f"Space file: `{record.space_file}`; {rounds} rounds in the ablation; {noise(seeds, splits)} per cell; "
        f"per-run results in `{record.name}/{RUNS_FILE}`.",
        "",
        "## Tuned values (selected on validation accuracy at the file's alpha)",
        "",
        "| variant | method | tuned values | best val acc (%) |",
        "|---|---|---|:---:|",
        *(f"| {r['variant']} | {r['method']} | {r['values']} | {r['best_val_acc']} |" for r in record.tuned),
        "",
    ]
    present = metrics_present(record, runs)
    families = {m: family(record, runs, m) for m in present}
    lines += ["## Verdicts", ""]
    lines += [f"- {verdict_sentence(found, m, record.reference)}" for m, found in families.items()]
    missing = [m for m in record.metrics if m not in present]
    if missing:
        names = ", ".join(METRICS[m].label for m in missing)
        lines += [f"- Not measured by these runs (their files predate it): {names}."]
    lines += [
        "",
        "Each metric is its own family of comparisons, corrected within it; the tables below give every cell's "
        f"effect, raw and adjusted p ([how to read them]({STATISTICS_LINK})).",
        "",
    ]
    for metric_name, found in families.items():
        metric = METRICS[metric_name]
        lines += [f"## {metric.label[0].upper()}{metric.label[1:]}", ""]
        lines += [table_markdown(runs, metric_name, seeds, splits).rstrip(), ""]
        lines += [f"### Against {record.reference}", ""]
        lines += [
            comparison.to_markdown(
                found, record.reference, metric.label, metric.scale, metric.unit, metric.digits
            ).rstrip(),
            "",
        ]
    if grads is not None and not grads.empty:
        lines += gradient_section(grads, runs)
    if record.dashboard:
        lines += ["## Dashboard", "", f"![The ablation's dashboard]({record.name}/{record.dashboard})", ""]
    lines += ["## Commands", "", "```", *record.commands, "```", ""]
    return "\n".join(lines)


def protocol_section(record: PageRecord) -> list[str]:
    """The paper's protocol beside the run's, and which of the paper's claims the run can and cannot test."""
    paper = PAPERS.get(record.name)
    if paper is None:
        return []
    lines = [
        "## The paper's protocol and this run's",
        "",
        f"| | {paper.paper} | this run |",
        "|---|---|---|",
        *(f"| {aspect} | {paper.fact(aspect)} | {record.run.get(aspect, '–')} |" for aspect in ASPECTS),
        "",
        "This run can test:",
        "",
        *(f"- {claim}" for claim in paper.testable),
        "",
        "It cannot test:",
        "",
        *(f"- {claim}" for claim in paper.untestable),
        "",
    ]
    return lines


def gradient_section(grads: pd.DataFrame, runs: pd.DataFrame) -> list[str]:
    lines = [
        "## Gradient norms",
        "",
        "The norm of the gradient of each weighted loss term next to cross-entropy's, and their cosine, on the first "
        "batch of every local epoch of the probed rounds (`diagnostics.gradient_norms`); a sample-weighted mean over "
        "the clients, then the mean over the probed rounds and the runs. FedAvg's row gives cross-entropy's alone. "
        "Measurements, not tests.",
        "",
    ]
    for setting in dict.fromkeys(runs["setting"]):
        ratios = gradients.ratio_by_round(grads, setting)
        lines += [f"### {setting}", "", gradients.term_markdown(gradients.by_term(grads, setting)).rstrip(), ""]
        if not ratios.empty:
            lines += ["Ratio ‖weight · ∇ term‖ / ‖∇ cross-entropy‖ by round:", ""]
            lines += [gradients.round_markdown(ratios).rstrip(), ""]
    return lines


# ---------------------------------------------------------------- the files


def read(folder: Path) -> tuple[PageRecord, pd.DataFrame, pd.DataFrame | None]:
    record = PageRecord.load(folder)
    runs = pd.read_csv(folder / RUNS_FILE)
    for column in ("variant", "setting", "status", "method"):
        if column in runs:
            runs[column] = runs[column].astype(str)
    grads_file = folder / GRADIENTS_FILE
    grads = pd.read_csv(grads_file) if grads_file.is_file() else None
    if grads is not None:
        for column in ("variant", "setting"):
            grads[column] = grads[column].astype(str)
    return record, runs, grads


def page_folders(results_dir: Path) -> list[Path]:
    """The pages made from committed runs: every folder of results_dir with a page.yaml, by name."""
    return sorted(p.parent for p in results_dir.glob(f"*/{PAGE_FILE}"))


def rendered(results_dir: Path) -> dict[Path, str]:
    """Every page and the index, as they should read: path -> text."""
    pages: dict[Path, str] = {}
    records = []
    for folder in page_folders(results_dir):
        record, runs, grads = read(folder)
        pages[results_dir / f"{record.name}.md"] = render(record, runs, grads)
        records.append((record, runs))
    pages[results_dir / INDEX_FILE] = render_index(records)
    return pages


INDEX_INTRO = f"""# Results

Every page here is generated from the runs committed beside it (`<page>/runs.csv` and `<page>/page.yaml`):
`python -m tools.results_pages --write` writes them and a test fails when a page differs from what its runs give.
A new run of a paper table: `python scripts/reproduce.py NAME` (it writes the runs, the record and the page). How
to read the numbers (paired differences, their intervals, raw and Holm-adjusted p, which noise they include):
[Statistics]({STATISTICS_LINK}).
"""


def render_index(records: list[tuple[PageRecord, pd.DataFrame]]) -> str:
    lines = [INDEX_INTRO, "| page | what | run | command |", "|---|---|---|---|"]
    for record, _ in records:
        lines.append(
            f"| [{record.name}.md]({record.name}.md) | {record.shape} | {record.generated}, commit {record.commit} "
            f"| `python scripts/reproduce.py {record.name}` |"
        )
    lines += [
        "| [protocols.md](protocols.md) | FedUV's and FedLD's official training protocols, fixed variants (no "
        "per-run file committed: tables only, no tests) | 2026-11-23, commit 8aa7b7e | "
        "`python scripts/ablate.py --space search_spaces/protocols/feduv_official.yaml --seeds 3 --ignore-studies` |",
        "",
        "## What the pages say",
        "",
        "Computed from the committed runs by the same code as the pages; each metric's comparisons with the page's "
        "reference are one family, Holm-corrected.",
        "",
    ]
    for record, runs in records:
        lines += [f"### [{record.title}]({record.name}.md)", ""]
        lines += [
            f"- {verdict_sentence(family(record, runs, m), m, record.reference)}" for m in metrics_present(record, runs)
        ]
        lines += [f"- Note: {note}" for note in record.notes]
        lines.append("")
    return "\n".join(lines)


def write(results_dir: Path) -> list[Path]:
    """Regenerate every page and the index; the paths whose text changed."""
    changed = []
    for path, text in rendered(results_dir).items():
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
            changed.append(path)
    return changed


def stale(results_dir: Path) -> list[Path]:
    """The pages (and index) whose committed text differs from what their runs give."""
    return [path for path, text in rendered(results_dir).items() if not path.is_file() or path.read_text() != text]
