"""Issue 59's careless inputs that the search-space file itself can hold: a union-typed field refused on one readable
line (config/io.py's folding of pydantic's per-member errors), and an objective's direction against the metric's
declared sense (config/space.py's OBJECTIVES) refused unless tune.against_sense names it."""

from __future__ import annotations

import pytest

from raytune_fl.config import ConfigError, parse_space
from raytune_fl.config.space import single_point
from tests.support import changed_space


def _refusal(*changes) -> str:
    with pytest.raises(ConfigError) as error:
        parse_space(changed_space(*changes))
    return str(error.value)


# ---- one readable line for a union-typed field ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("metric", "first_line"),
    [
        # str | list[str | dict[str, Literal]]: the list member got furthest, and in it the mapping member
        (
            [{"val_acc": "maximize"}],
            "tune.metric.0.val_acc: Input should be 'max' or 'min' (got 'maximize'); did you mean 'max'?",
        ),
        (
            [{"val_acc": "max"}, {"val_loss": "minimize"}],
            "tune.metric.1.val_loss: Input should be 'max' or 'min' (got 'minimize'); did you mean 'min'?",
        ),
        # no member takes a mapping: what the field takes, in words
        ({"val_acc": "max"}, "tune.metric: expected a string or a list (got {'val_acc': 'max'})"),
    ],
)
def test_a_union_field_is_refused_on_one_line_without_pydantics_member_names(metric, first_line):
    message = _refusal(("tune.metric", metric))
    assert message.splitlines() == [first_line, "  (the only problem in search space)"]


@pytest.mark.parametrize(
    ("value", "first_line"),
    [
        # int | Literal["auto"]: neither member takes the text, the literal is the likely one
        ("autoo", "base.resources.client_batch: expected an integer or 'auto' (got 'autoo'); did you mean 'auto'?"),
        # the int member's own complaint says more than "not 'auto'"
        (
            2.5,
            "base.resources.client_batch: Input should be a valid integer, got a number with a fractional part "
            "(got 2.5)",
        ),
    ],
)
def test_an_int_or_auto_field_says_what_it_takes(value, first_line):
    assert _refusal(("base.resources.client_batch", value)).splitlines()[0] == first_line


def test_a_field_that_is_no_union_keeps_its_name_even_when_it_reads_like_a_member():
    # Distribution's field `int` is a field, not pydantic's name for a union's int member
    message = _refusal(("variants.full.search", {"mu": {"int": [3, "x"]}}))
    assert message.startswith("variants.full.search.mu.int.1: Input should be a valid integer"), message


# ---- a direction against the metric's sense ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("metric", "first_line"),
    [
        (
            [{"val_loss": "max"}],
            "tune.metric: [val_loss: max] maximises a metric that improves as it falls (its sense: min); write "
            "val_loss: min, or add tune.against_sense: [val_loss] to maximise it on purpose",
        ),
        (
            [{"val_acc": "max"}, {"client_acc_var": "max"}],
            "tune.metric: [client_acc_var: max] maximises a metric that improves as it falls (its sense: min); write "
            "client_acc_var: min, or add tune.against_sense: [client_acc_var] to maximise it on purpose",
        ),
        (
            [{"val_acc": "min"}],
            "tune.metric: [val_acc: min] minimises a metric that improves as it rises (its sense: max); write "
            "val_acc: max, or add tune.against_sense: [val_acc] to minimise it on purpose",
        ),
    ],
)
def test_a_direction_against_the_metrics_sense_is_refused_naming_both_fixes(metric, first_line):
    message = _refusal(("tune.metric", metric), ("base.diagnostics", {"client_accuracy": True}))
    assert message.splitlines()[0] == first_line


def test_against_sense_lets_the_rare_intended_direction_run_and_refuses_a_name_it_does_not_need():
    space = parse_space(changed_space(("tune.metric", [{"val_loss": "max"}]), ("tune.against_sense", ["val_loss"])))
    assert [(o.metric, o.mode) for o in space.tune.objectives] == [("val_loss", "max")]
    both = [{"val_acc": "max"}, {"val_loss": "min"}]
    agreeing = parse_space(changed_space(("tune.metric", both), ("tune.scheduler", {"asha": None})))
    assert [o.mode for o in agreeing.tune.objectives] == ["max", "min"]
    stale = _refusal(("tune.metric", "val_acc"), ("tune.against_sense", ["val_loss"]))
    assert stale.splitlines()[0] == (
        "tune.against_sense: 'val_loss' is not given against its sense in tune.metric (its sense: min); drop it "
        "from against_sense"
    )


# ---- a search of one configuration ------------------------------------------------------------------------------


def test_a_search_of_one_value_choices_is_one_configuration():
    def point(search):
        return single_point(parse_space(changed_space(("variants.full.search", search))).variants["full"].search)

    assert point({"mu": {"choice": [0.1]}, "lambda": {"choice": [2, 2]}}) == {"mu": 0.1, "lambda": 2}
    assert point({"mu": {"choice": [0.1]}, "lambda": {"uniform": [0.5, 3.0]}}) is None  # lambda is searched
    assert point({"mu": {"choice": [0.1, 1.0]}}) is None
    assert single_point({}) is None  # no search: the variant runs its fixed values, nothing to pick
