"""Selected values at the edge of their search range (tune/edges.py): the rule by hand on each kind of range, the
summary's edge lines, the tune parent's edge tags, and edges through a study manifest's JSON."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from raytune_fl.cli.tune import print_summary
from raytune_fl.config import Distribution
from raytune_fl.tracking.records import tune_parent_end
from raytune_fl.tune.edges import Edge, edge_flags
from raytune_fl.tune.outcome import VariantOutcome


def _one(spec: dict, value: object) -> list[tuple[str, str]]:
    return [(e.side, e.scale) for e in edge_flags({"x": Distribution(**spec)}, {"x": value})]


def test_a_log_range_measures_the_distance_in_log_space():
    # [0.001, 10]: 4 decades, 5 % of them is 0.2 decades
    assert math.log10(0.00116 / 0.001) == pytest.approx(0.0645, abs=1e-4)  # <= 0.2: lower edge
    assert _one({"loguniform": (0.001, 10)}, 0.00116) == [("lower", "log")]
    assert math.log10(10 / 9.17) == pytest.approx(0.0376, abs=1e-4)  # <= 0.2: upper edge
    assert _one({"loguniform": (0.001, 10)}, 9.17) == [("upper", "log")]
    # 0.0016: log10(1.6) = 0.204 decades from the low end, just over 0.2; 6.3: log10(10/6.3) = 0.2007
    assert _one({"loguniform": (0.001, 10)}, 0.0016) == []
    assert _one({"loguniform": (0.001, 10)}, 6.3) == []
    assert _one({"loguniform": (0.001, 10)}, 0.1) == []  # the middle
    # linearly 0.0016 is the bottom 0.006 % of [0.001, 10]: only the log scale says it is not at the edge


def test_a_uniform_range_measures_it_linearly():
    # [0, 10]: 5 % is 0.5
    assert _one({"uniform": (0.0, 10.0)}, 9.6) == [("upper", "linear")]  # 0.4 below the top
    assert _one({"uniform": (0.0, 10.0)}, 9.5) == [("upper", "linear")]  # exactly 0.5: within
    assert _one({"uniform": (0.0, 10.0)}, 9.17) == []  # 0.83 below the top: 8.3 % of the range
    assert _one({"uniform": (0.0, 10.0)}, 5.0) == []
    assert _one({"uniform": (0.0, 10.0)}, 0.3) == [("lower", "linear")]
    assert _one({"uniform": (0.5, 3.0)}, 0.62) == [("lower", "linear")]  # 0.12 <= 0.05 * 2.5 = 0.125


def test_an_int_range_counts_its_ends_linearly():
    # [0, 100]: 5 % is 5, so 0..5 and 95..100
    assert _one({"int": (0, 100)}, 5) == [("lower", "linear")]
    assert _one({"int": (0, 100)}, 6) == []
    assert _one({"int": (0, 100)}, 95) == [("upper", "linear")]
    assert _one({"int": (0, 100)}, 94) == []
    # [1, 10]: 5 % is 0.45, so only the ends themselves
    assert _one({"int": (1, 10)}, 1) == [("lower", "linear")]
    assert _one({"int": (1, 10)}, 2) == []
    assert _one({"int": (1, 10)}, 10) == [("upper", "linear")]


def test_a_choice_has_no_edge_and_unselected_names_are_skipped():
    assert _one({"choice": [1, 2, 3]}, 3) == []
    assert _one({"choice": ["per_step", "paper"]}, "paper") == []
    space = {"a": Distribution(uniform=(0.0, 1.0)), "b": Distribution(loguniform=(0.01, 1.0))}
    assert edge_flags(space, {}) == []  # no selection (no trial succeeded): nothing to flag
    # the search space's order, each edge with its value and the bound it is near
    found = edge_flags(space, {"b": 0.011, "a": 0.99, "fixed": 5.0})
    assert found == [Edge("a", "upper", 0.99, 1.0, "linear"), Edge("b", "lower", 0.011, 0.01, "log")]
    assert found[0].describe() == "a=0.99 is within 5 % of its upper bound 1 (linear scale); widen a's range"


EDGES = [Edge("lambda", "upper", 9.17, 10.0, "log"), Edge("mu", "lower", 0.00116, 0.001, "log")]
LAMBDA_LINE = "lambda=9.17 is within 5 % of its upper bound 10 (log scale); widen lambda's range"
MU_LINE = "mu=0.00116 is within 5 % of its lower bound 0.001 (log scale); widen mu's range"


def _outcome(edges: list[Edge]) -> VariantOutcome:
    metrics = {"val_acc": 0.8, "test_acc": 0.7, "round": 3.0}
    params = {"lambda": 9.17, "mu": 0.00116}
    return VariantOutcome("full", "univarfl", params, metrics, {"finished": 3}, None, "", 8.0, edges=edges)


def test_the_summary_prints_a_line_under_the_variant_per_edge(capsys):
    print_summary([_outcome(EDGES), dataclasses.replace(_outcome([]), variant="other")], "sqlite:////m.db", "s", 1.0)
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("            full: "))
    assert lines[at + 1 : at + 3] == [f"{'':>18}edge: {LAMBDA_LINE}", f"{'':>18}edge: {MU_LINE}"]
    assert lines[at + 3].startswith("           other: ")  # no edge: no line
    assert sum("edge:" in line for line in lines) == 2


def test_the_tune_parent_tags_each_edge_and_sums_them_up_in_one_line():
    end = tune_parent_end({"lambda": 9.17, "mu": 0.00116}, {"val_acc": 0.8}, {"finished": 3}, 0, EDGES)
    assert end.tags["edge.lambda"] == "upper" and end.tags["edge.mu"] == "lower"
    assert end.tags["edges"] == f"{LAMBDA_LINE}; {MU_LINE}"
    plain = tune_parent_end({"lambda": 5.0}, {"val_acc": 0.8}, {"finished": 3}, 0)
    assert not any(k.startswith("edge") for k in plain.tags)  # none flagged: no tags


def test_edges_come_back_from_a_study_manifests_json():
    saved = json.loads(json.dumps(dataclasses.asdict(_outcome(EDGES))))  # what StudyManifest writes and reads
    assert saved["edges"][0] == {"name": "lambda", "side": "upper", "value": 9.17, "bound": 10.0, "scale": "log"}
    assert VariantOutcome(**saved).edges == EDGES
    del saved["edges"]  # a manifest from before edges
    assert VariantOutcome(**saved).edges == []
