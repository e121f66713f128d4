"""A results page, `docs/results/<name>.md`, made only from the files committed beside it in `<name>/`:

- `page.yaml`: what the run was (title, protocol, tuned values, commands, machine, commit, date, wall time, notes);
- `runs.csv`: one row per run with its final-round scores (and, since they exist, the mean of the last rounds and
  the client spread);
- `gradients.csv` (optional): the gradient-norm probe's rounds.

One endpoint is primary (`PageRecord.primary`: final-round test accuracy against the page's reference); every other
metric is secondary. A page whose paper compares its method with several baselines names them all
(`PageRecord.references`, the primary reference first): each further reference is compared with the page's
`contenders` on the primary endpoint, one corrected family per reference, and every such comparison gets its sentence.
Runs that ended at chance (engine/chance.py) are *collapsed* and out of every statistic: runs committed before that
status existed are classified on the page against `PageRecord.chance_bound`.

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
from typing import Any

import pandas as pd
import yaml

from raytune_fl import metrics
from raytune_fl.ablation.table import COUNTED, markdown_rows, noise, summarise
from raytune_fl.engine.chance import at_chance
from raytune_fl.metrics import (
    CLIENT_ACC_P10,
    CLIENT_ACC_VAR,
    CLIENT_ACC_WORST,
    CLIENT_TEST_ACC,
    LAST_K,
    PERSONAL_TEST_ACC,
    TEST_ACC,
    TEST_ACC_LAST_K,
    VAL_ACC,
)
from raytune_fl.report import comparison, gradients
from raytune_fl.report.paper_protocols import ASPECTS, PAPERS
from raytune_fl.tracking.schema import TRIAL_COLLAPSED

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
    # on each client's own test part (partition.test_fraction), pooled over clients
    PERSONAL_TEST_ACC: Metric("final-round accuracy of the model each client uses on its own test part"),
    CLIENT_TEST_ACC: Metric("final-round accuracy of the global model on each client's own test part"),
    CLIENT_ACC_WORST: Metric("worst client's accuracy (final round)"),
    CLIENT_ACC_P10: Metric("10th percentile of client accuracy (numpy interpolation, final round)"),
    # a variance of accuracies: in points² (x 10,000); lower is fairer
    CLIENT_ACC_VAR: Metric("variance of accuracy over clients (final round)", 1e4, "points²", 1, False),
}
# the bottom decile (the mean of the worst ceil(K/10) clients, q-FFL's "worst 10 %"): runs that have its column
# show it in place of the 10th percentile older runs recorded
BOTTOM10 = metrics.CLIENT_ACC_BOTTOM10
METRICS[BOTTOM10] = Metric("mean accuracy of the worst 10 % of clients (the worst ceil(K/10), final round)")
CLIENT_METRICS = (CLIENT_ACC_WORST, CLIENT_ACC_P10, BOTTOM10, CLIENT_ACC_VAR)
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
    primary: str = TEST_ACC  # the one primary endpoint (against `reference`); every other metric is secondary
    # the final test accuracy at or under which a run is collapsed (engine/chance.py: the test split's trivial rate
    # + 2 binomial standard errors), for runs committed before the status existed; None: the runs' status alone
    chance_bound: float | None = None
    # training images, validation fraction and clients: how many held-out images a client is scored on on average
    held_out: dict[str, float] | None = None
    # every reference the paper compares with, the primary (`reference`) first; [] = `reference` alone. Each further
    # one is compared with `contenders` only (default: every variant that is no reference), on `primary`
    references: list[str] = field(default_factory=list)
    contenders: list[str] = field(default_factory=list)
    # what the studies selected on (`best_val_acc` in `tuned` is its best): val_acc, or personal_val_acc (each
    # client's own model on its validation part)
    tuned_on: str = VAL_ACC

    def __post_init__(self) -> None:
        if self.references and self.references[0] != self.reference:
            raise ValueError(
                f"references: the first must be the primary reference {self.reference!r} (got {self.references!r})"
            )
        if set(self.contenders) & set(self.references):
            raise ValueError(f"contenders: a reference cannot be a contender (got {self.contenders!r})")

    @property
    def further_references(self) -> list[str]:
        """The references after the primary one, each compared with the contenders in a family of its own."""
        return list(dict.fromkeys(r for r in self.references[1:] if r != self.reference))

    @classmethod
    def load(cls, folder: Path) -> PageRecord:
        return cls(**yaml.safe_load((folder / PAGE_FILE).read_text()))

    def dump(self, folder: Path) -> Path:
        path = folder / PAGE_FILE
        path.write_text(yaml.safe_dump(asdict(self), sort_keys=False, allow_unicode=True, width=120))
        return path


# ---------------------------------------------------------------- the numbers


def _tuned_heading(tuned_on: str) -> list[str]:
    """The tuned values' heading and table head: what the studies selected on."""
    if tuned_on == VAL_ACC:
        return [
            "## Tuned values (selected on validation accuracy at the file's alpha)",
            "",
            "| variant | method | tuned values | best val acc (%) |",
        ]
    return [
        f"## Tuned values (selected on {tuned_on} at the file's setting: each client's own model on its "
        "validation part)",
        "",
        f"| variant | method | tuned values | best {tuned_on.replace('_', ' ')} (%) |",
    ]


def metrics_present(record: PageRecord, runs: pd.DataFrame) -> list[str]:
    """The page's metrics the runs have values for (runs made before a column existed lack it); the 10th
    percentile gives way to the bottom decile where the runs have that."""
    return [m for m in _metrics(record, runs) if m in runs and runs[m].notna().any()]


def _metrics(record: PageRecord, runs: pd.DataFrame) -> list[str]:
    has_bottom = BOTTOM10 is not None and BOTTOM10 in runs and runs[BOTTOM10].notna().any()
    return [BOTTOM10 if (m == CLIENT_ACC_P10 and has_bottom) else m for m in record.metrics]


def classify(record: PageRecord, runs: pd.DataFrame) -> pd.DataFrame:
    """`runs` with every finished run whose final test accuracy is at chance (`at_chance` against the page's
    `chance_bound`) marked collapsed; unchanged without a bound."""
    if record.chance_bound is None or TEST_ACC not in runs:
        return runs
    bound = float(record.chance_bound)
    low = runs[TEST_ACC].astype(float).map(lambda acc: at_chance(acc, bound))
    return runs.assign(status=runs["status"].where(~(low & (runs["status"] == COUNTED)), TRIAL_COLLAPSED))


def family(record: PageRecord, runs: pd.DataFrame, metric: str) -> list[comparison.Difference]:
    """Every variant x setting against the reference on one metric: one family, corrected together."""
    return comparison.differences(runs, record.reference, metric=metric, correction=record.correction)


def reference_families(record: PageRecord, runs: pd.DataFrame) -> dict[str, list[comparison.Difference]]:
    """Each further reference against the contenders (`PageRecord.contenders`, default every variant that is no
    reference) on the primary metric, in every setting: one family per reference, corrected within it."""
    if record.primary not in runs or not runs[record.primary].notna().any():
        return {}
    families = {}
    for reference in record.further_references:
        contenders = record.contenders or [v for v in dict.fromkeys(runs["variant"]) if v not in record.references]
        compared = runs[runs["variant"].isin([reference, *contenders])]
        families[reference] = comparison.differences(
            compared, reference, metric=record.primary, correction=record.correction
        )
    return families


def comparison_sentence(d: comparison.Difference, reference: str, metric: Metric) -> str:
    """One comparison with a further reference, said whichever way it falls: 'univarfl_tuned at alpha=0.01:
    resolved below freeze, -4.13 points, 98.75 % interval [-5.75, -2.52], adjusted p = 0.0021, sign-flip p =
    0.031', or 'not resolved against freeze, ...' with the interval that contains 0."""
    if math.isnan(d.delta):
        return f"{d.variant} at {d.setting}: no finished run to compare with {reference}"
    f = f"+.{metric.digits}f"
    effect = f"{d.delta * metric.scale:{f}} {metric.unit}"
    if math.isnan(d.p_value):
        return f"{d.variant} at {d.setting}: {effect} against {reference}, too few runs to judge"
    if d.significant:
        verdict = f"resolved {'above' if d.delta > 0 else 'below'} {reference}"
    else:
        verdict = f"not resolved against {reference}"
    interval = f"{100 * d.level:.4g} % interval [{d.ci_low * metric.scale:{f}}, {d.ci_high * metric.scale:{f}}]"
    flips = "" if math.isnan(d.permutation_p) else f", sign-flip p = {d.permutation_p:.2g}"
    return f"{d.variant} at {d.setting}: {verdict}, {effect}, {interval}, adjusted p = {d.verdict_p:.2g}{flips}"


def reference_sentence(found: list[comparison.Difference], metric_name: str, reference: str) -> str:
    """The bullet of one further reference's family: its size and correction, every comparison's sentence, and the
    smallest difference the family could have called."""
    metric = METRICS[metric_name]
    judged = [d for d in found if not math.isnan(d.p_value)]
    if not found:
        return f"{metric.label.capitalize()} against {reference}: no contender has runs to compare."
    head = f"{metric.label.capitalize()} against {reference}, {len(judged)} comparison{'s' if len(judged) != 1 else ''}"
    if judged and judged[0].correction != "none":
        head += f" ({comparison.CORRECTION_NAMES.get(judged[0].correction, judged[0].correction)}-corrected)"
    mdd = comparison.detectable(found, metric.scale, metric.unit)
    tail = f" {mdd[0].upper()}{mdd[1:]}." if mdd else ""
    return f"{head}: " + "; ".join(comparison_sentence(d, reference, metric) for d in found) + f".{tail}"


def _direction(d: comparison.Difference, metric: Metric, primary: dict[tuple[str, str], comparison.Difference]) -> str:
    """For a metric where lower is better (the variance over clients), which way the difference points. A smaller
    spread is called fairer only where the variant's primary difference in that setting is not below 0 at all (a
    spread that shrank because every client got worse is no gain); otherwise it says what it cost."""
    if metric.higher_is_better:
        return ""  # 'above' and 'below' say it for an accuracy
    if d.delta >= 0:
        return " (less fair)"
    cost = primary.get((d.variant, d.setting))
    if cost is not None and not math.isnan(cost.delta) and cost.delta >= 0:
        return " (fairer)"
    worse = "" if cost is None or math.isnan(cost.delta) else f", at {cost.delta * 100:+.2f} points of test accuracy"
    return f" (a smaller spread, not called fairer{worse})"


def verdict_sentence(
    found: list[comparison.Difference],
    metric_name: str,
    reference: str,
    primary: dict[tuple[str, str], comparison.Difference] | None = None,
) -> str:
    """The one sentence a page (and the index) says about a family: which differences survive the correction, and
    the smallest difference the family could have called. `primary`: the primary family's cells by (variant,
    setting), which the fairness label reads."""
    metric = METRICS[metric_name]
    judged = [d for d in found if not math.isnan(d.p_value)]
    if not judged:
        return f"{metric.label.capitalize()}: too few runs to compare any variant with {reference}."
    how = comparison.CORRECTION_NAMES.get(judged[0].correction, judged[0].correction)
    head = f"{metric.label.capitalize()}, {len(judged)} comparison{'s' if len(judged) != 1 else ''} with {reference}"
    head += "" if judged[0].correction == "none" else f" ({how}-corrected)"
    mdd = comparison.detectable(found, metric.scale, metric.unit)
    tail = f" {mdd[0].upper()}{mdd[1:]}." if mdd else ""
    found_sig = [d for d in judged if d.significant]
    if not found_sig:
        best = min(judged, key=lambda d: d.p_value)  # the closest call, by its raw p
        return (
            f"{head}: no difference is resolved; the closest is {best.variant} at {best.setting}, "
            f"{_effect(best, metric)}, raw p = {best.p_value:.2g}, adjusted p = {best.verdict_p:.2g}.{tail}"
        )
    listed = "; ".join(
        f"{d.variant} at {d.setting} {'above' if d.delta > 0 else 'below'} {reference}, "
        f"{_effect(d, metric)}, adjusted p = {d.verdict_p:.2g}"
        f"{_direction(d, metric, primary or {})}"
        for d in found_sig
    )
    rest = len(judged) - len(found_sig)
    others = f" The other {rest} {'is' if rest == 1 else 'are'} not resolved (interval contains 0)." if rest else ""
    return f"{head}: {len(found_sig)} resolved: {listed}.{others}{tail}"


def _effect(d: comparison.Difference, metric: Metric) -> str:
    """'-12.04 points, not resolved: 99.58 % interval [-40.10, +16.00]', or '+4.70 points, 99.58 % interval
    [+2.30, +7.10]' when called."""
    f = f"+.{metric.digits}f"
    interval = f"{100 * d.level:.4g} % interval [{d.ci_low * metric.scale:{f}}, {d.ci_high * metric.scale:{f}}]"
    effect = f"{d.delta * metric.scale:{f}} {metric.unit}"
    return f"{effect}, {interval}" if d.significant else f"{effect}, not resolved: {interval}"


def table_markdown(runs: pd.DataFrame, metric_name: str, seeds: int, splits: int) -> str:
    """Variants down, settings across: mean ± sample std of the metric over the counted runs, the best of each
    column in bold, '(n runs, k collapsed)' where runs ended at chance and '(n/runs)' where others failed."""
    metric = METRICS[metric_name]
    bounded = metric.unit == "points"  # accuracies stay in [0, 1]; a variance has no such bound here
    summary = summarise(
        runs, metric=metric_name, bounds=(0.0, 1.0) if bounded else None, lower_is_better=not metric.higher_is_better
    )
    collapsed = runs[runs["status"] == TRIAL_COLLAPSED].groupby(["variant", "setting"]).size()
    table: dict[str, dict[str, str]] = {}
    for row in summary.itertuples():
        k = int(collapsed.get((row.variant, row.setting), 0))
        cell = "–" if math.isnan(row.mean) else f"{row.mean * metric.scale:.2f}"
        cell += "" if math.isnan(row.std) else f" ± {row.std * metric.scale:.2f}"
        cell = f"**{cell}**" if row.best else cell
        if k:
            cell += f" ({row.runs} runs, {k} collapsed)"
        elif row.n < row.runs:
            cell += f" ({row.n}/{row.runs})"
        table.setdefault(str(row.variant), {})[str(row.setting)] = cell
    settings = list(dict.fromkeys(summary["setting"].astype(str)))
    lines = markdown_rows(pd.DataFrame.from_dict(table, orient="index")[settings])
    unit = "%" if bounded else metric.unit
    best = "best" if metric.higher_is_better else "lowest"
    lines += [
        "",
        f"Cells: {metric.label} in {unit}, mean ± sample std (ddof=1) over {noise(seeds, splits)}; **bold** = {best} "
        "in its column; (n runs, k collapsed) = k of the cell's n runs ended at chance and are not averaged in; "
        "(n/runs) = only n runs finished (diverged or failed runs are not averaged in).",
    ]
    return "\n".join(lines) + "\n"


def primary_text(record: PageRecord, runs: pd.DataFrame | None = None) -> str:
    """What the page's one primary endpoint is, against which references, and that everything else is secondary."""
    text = f"Primary endpoint: {METRICS[record.primary].label} against {record.reference}."
    further = record.further_references
    if further:
        contenders = record.contenders or (
            [] if runs is None else [v for v in dict.fromkeys(runs["variant"]) if v not in record.references]
        )
        text += (
            f" The paper's other baselines, {_listed(further)}, are compared on the same endpoint with "
            f"{_listed(contenders) or 'every other variant'} only: each reference its own corrected family."
        )
    return text + (
        " Every other metric is secondary: reported with the same statistics, each its own corrected family, but no "
        "claim rests on it."
    )


def _listed(names: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + f" and {names[-1]}" if names else ""


def held_out_text(record: PageRecord, runs: pd.DataFrame) -> str:
    """How many held-out images a client's accuracy (and so the worst client's) is measured on: the average, from
    the page's training images, validation fraction and clients; '' without them or without a per-client metric."""
    if not record.held_out or not any(m in CLIENT_METRICS for m in metrics_present(record, runs)):
        return ""
    keys = ("train_images", "val_fraction", "clients")  # not-a-metric: page.yaml's held_out keys
    images, fraction, clients = (record.held_out[k] for k in keys)
    per_client = images * fraction / clients
    return (
        f"Per-client accuracies (the worst client's among them) are measured on each client's own held-out "
        f"validation images: {fraction:.0%} of its samples, on average {per_client:.0f} images "
        f"({int(images):,} training images x {fraction:.0%} / {int(clients)} clients). That is an average: under "
        "label skew client sizes vary widely, and the committed runs do not record how many the worst client held; "
        f"one image is {100 / per_client:.1f} points of an average client's accuracy."
    )


# ---------------------------------------------------------------- the page


def render(record: PageRecord, runs: pd.DataFrame, grads: pd.DataFrame | None = None) -> str:
    """The whole page from its record and runs (and gradient rounds): deterministic, nothing read from a store."""
    runs = classify(record, runs)
    seeds = runs["seed"].nunique()
    splits = runs["partition_seed"].nunique() if "partition_seed" in runs else 1
    lines = _head(record)
    lines += protocol_section(record)
    lines += _run_section(record, runs, noise(seeds, splits))
    present = metrics_present(record, runs)
    families = {m: family(record, runs, m) for m in present}
    further = reference_families(record, runs)
    collapsed = comparison.collapsed_runs(runs)
    lines += _verdict_section(record, runs, families, further, collapsed)
    for metric_name, found in families.items():
        lines += _metric_section(record, runs, metric_name, seeds, splits)
        lines += _comparison_lines(record.reference, found, metric_name, collapsed)
        for reference, against in further.items() if metric_name == record.primary else ():
            lines += _comparison_lines(reference, against, metric_name, collapsed, " (the contenders only)")
    if grads is not None and not grads.empty:
        lines += gradient_section(grads, runs)
    if record.dashboard:
        lines += ["## Dashboard", "", f"![The ablation's dashboard]({record.name}/{record.dashboard})", ""]
    lines += ["## Commands", "", "```", *record.commands, "```", ""]
    return "\n".join(lines)


def _head(record: PageRecord) -> list[str]:
    """The title, how the page was made, when and on what, its notes and the variants it compares."""
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
    return [*lines, f"Variants: {record.shape}", ""]


def _run_section(record: PageRecord, runs: pd.DataFrame, per_cell: str) -> list[str]:
    """The run's protocol (the space file's header), its shape, and the tuned values."""
    rounds = int(runs["rounds_completed"].max())
    return [
        "## The run",
        "",
        *(f"> {line}" if line else ">" for line in record.protocol),
        "",
        f"Space file: `{record.space_file}`; {rounds} rounds in the ablation; {per_cell} per cell; "
        f"per-run results in `{record.name}/{RUNS_FILE}`.",
        "",
        *_tuned_heading(record.tuned_on),
        "|---|---|---|:---:|",
        *(f"| {r['variant']} | {r['method']} | {r['values']} | {r['best_val_acc']} |" for r in record.tuned),
        "",
    ]


def _verdict_section(
    record: PageRecord, runs: pd.DataFrame, families: dict[str, Any], further: dict[str, Any], collapsed: Any
) -> list[str]:
    """The verdicts, the metrics these runs did not measure, how to read the tables, the collapsed runs and what
    a client is scored on."""
    lines = ["## Verdicts", "", primary_text(record, runs), ""]
    lines += verdict_lines(record, runs, families, further)
    missing = [m for m in _metrics(record, runs) if m not in families]
    if missing:
        names = ", ".join(METRICS[m].label for m in missing)
        lines += [f"- Not measured by these runs (their files predate it): {names}."]
    lines += [
        "",
        "Each metric is its own family of comparisons, corrected within it; the tables below give every cell's "
        f"effect, raw and adjusted p ([how to read them]({STATISTICS_LINK})).",
        "",
    ]
    if record.chance_bound is not None:
        lines += [
            f"Collapsed runs: {collapsed[0]} of {collapsed[1]} ended at chance, a final test accuracy at or under "
            f"{100 * float(record.chance_bound):.2f} % (the test split's trivial rate plus 2 binomial standard "
            "errors, engine/chance.py); they are out of every table and comparison below.",
            "",
        ]
    held = held_out_text(record, runs)
    return lines + ([held, ""] if held else [])


def _metric_section(record: PageRecord, runs: pd.DataFrame, metric_name: str, seeds: int, splits: int) -> list[str]:
    """A metric's heading and its table."""
    metric = METRICS[metric_name]
    return [
        f"## {metric.label[0].upper()}{metric.label[1:]}",
        "",
        table_markdown(runs, metric_name, seeds, splits).rstrip(),
        "",
    ]


def _comparison_lines(reference: str, found: Any, metric_name: str, collapsed: Any, which: str = "") -> list[str]:
    """Every variant against `reference` on a metric (`which`: whom the family holds, when not everyone)."""
    metric = METRICS[metric_name]
    table = comparison.to_markdown(found, reference, metric.label, metric.scale, metric.unit, metric.digits, collapsed)
    return [f"### Against {reference}{which}", "", table.rstrip(), ""]


def verdict_lines(
    record: PageRecord,
    runs: pd.DataFrame,
    families: dict[str, list[comparison.Difference]] | None = None,
    further: dict[str, list[comparison.Difference]] | None = None,
) -> list[str]:
    """One bullet per metric: the primary endpoint's first, then one per further reference (the primary endpoint
    against each of the paper's other baselines), then the secondary metrics."""
    if families is None:
        families = {m: family(record, runs, m) for m in metrics_present(record, runs)}
    if further is None:
        further = reference_families(record, runs)
    primary = {(d.variant, d.setting): d for d in families.get(record.primary, [])}
    ordered = sorted(families, key=lambda m: m != record.primary)  # stable: the primary first, the rest in order
    lines = []
    for m in ordered:
        lines.append(
            f"- {'**Primary**' if m == record.primary else 'Secondary'}: "
            f"{verdict_sentence(families[m], m, record.reference, primary)}"
        )
        if m == record.primary:
            lines += [
                f"- **Primary**, a further reference: {reference_sentence(found, m, reference)}"
                for reference, found in further.items()
            ]
    return lines


def protocol_section(record: PageRecord) -> list[str]:
    """The paper's protocol beside the run's, and which of the paper's claims the run can and cannot test; a page
    shaped after no one paper (the privacy and personalised tables): the run's protocol alone."""
    paper = PAPERS.get(record.name)
    if paper is None:
        if not record.run:
            return []
        rows = [f"| {aspect} | {record.run[aspect]} |" for aspect in ASPECTS if aspect in record.run]
        return ["## This run's protocol", "", "| | this run |", "|---|---|", *rows, ""]
    lines = [
        "## The paper's protocol and this run's",
        "",
        f"| | {paper.paper} | this run |",
        "|---|---|---|",
        *(f"| {aspect} | {paper.fact(aspect)} | {record.run.get(aspect, '–')} |" for aspect in ASPECTS),
        "",
        paper.stand_in(record.run),
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
        "Computed from the committed runs by the same code as the pages. Each page has one primary endpoint, "
        "final-round test accuracy against its reference; the other metrics are secondary (reported, but no claim "
        "rests on them). Each metric's comparisons with the page's reference are one family, Holm-corrected, and so "
        "are the primary endpoint's comparisons with each further reference a page names (the paper's other "
        "baselines, against the paper's method only); a "
        'difference the corrected test does not call is "not resolved", with the interval at the family\'s level, '
        "and each family states the smallest difference it could have called (its minimum detectable difference). "
        "Runs that ended at chance (collapsed) are out of the statistics.",
        "",
    ]
    for record, runs in records:
        runs = classify(record, runs)
        lines += [f"### [{record.title}]({record.name}.md)", ""]
        lines += verdict_lines(record, runs)
        k, n = comparison.collapsed_runs(runs)
        lines += [f"- Collapsed runs (out of the statistics): {k} of {n}."] if record.chance_bound is not None else []
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
