"""tools/frozen_compare.py's comparison, on hand-built rows: no federation runs here."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from collections.abc import Mapping

from tests.support import REPO


def _load(file: str = "frozen_compare.py"):
    name = f"{file.removesuffix('.py')}_under_test"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "tools" / file)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up while the class is made
        spec.loader.exec_module(module)
    return sys.modules[name]


fc = _load()
runner = _load("_frozen_runner.py")  # standard library only at import


def _rows() -> list[dict]:
    log = [{"round": 1, "client": 0, "status": "trained", "steps": 5}]
    return [
        {"round": 1, "val_acc": 0.25, "val_loss": 2.0, "client_log": log, "diverged": float("nan")},
        {"round": 2, "val_acc": 0.5, "val_loss": 1.5, "client_log": [dict(log[0], round=2)]},
    ]


def _record(rows, model="m1", state="s1") -> dict:
    return {"rows": rows, "digests": {"model": model, "state": state}, "error": None}


def test_equal_rows_match_nan_included():
    assert fc.compare_rows(_rows(), _rows()) is None
    outcome = fc.compare_case("c", _record(_rows()), _record(_rows()))
    assert outcome.ok and outcome.rounds == (2, 2) and (outcome.rows, outcome.model, outcome.state) == (True,) * 3


def test_a_float_one_ulp_apart_is_a_difference():
    after = _rows()
    after[1]["val_loss"] = 1.5000000000000002
    mismatch = fc.compare_rows(_rows(), after)
    assert mismatch == fc.Mismatch(2, "val_loss", 1.5, 1.5000000000000002)
    assert "round 2 val_loss: before 1.5 != after 1.5000000000000002" in mismatch.describe()
    signed = _rows()
    signed[0]["val_acc"] = 0.0
    zero = _rows()
    zero[0]["val_acc"] = -0.0
    assert fc.compare_rows(signed, zero).key == "val_acc"  # bit for bit, not ==


def test_types_and_nested_values_are_compared_exactly():
    after = _rows()
    after[0]["round"] = 1.0  # == 1, but not the same row
    assert fc.compare_rows(_rows(), after).key == "round"
    after = _rows()
    after[1]["client_log"][0]["steps"] = 6
    mismatch = fc.compare_rows(_rows(), after)
    assert (mismatch.round, mismatch.key, mismatch.before, mismatch.after) == (2, "client_log[0].steps", 5, 6)


def test_a_missing_round_is_reported_with_its_number():
    mismatch = fc.compare_rows(_rows(), _rows()[:1])
    assert mismatch.round == 2 and mismatch.key == "(row)" and mismatch.after == fc.MISSING
    assert fc.compare_rows(_rows()[:1], _rows()).before == fc.ABSENT
    outcome = fc.compare_case("c", _record(_rows()), _record(_rows()[:1]))
    assert not outcome.ok and outcome.rows is False and outcome.rounds == (2, 1)


def test_an_added_key_fails_unless_allowed():
    after = _rows()
    for row in after:
        row["evaluate_count"] = 1
    mismatch = fc.compare_rows(_rows(), after)
    assert (mismatch.round, mismatch.key, mismatch.before, mismatch.after) == (1, "evaluate_count", fc.ABSENT, 1)
    assert fc.compare_rows(_rows(), after, allow_added=["evaluate_count"]) is None
    outcome = fc.compare_case("c", _record(_rows()), _record(after), ["evaluate_count"])
    assert outcome.ok and outcome.notes == []
    removed = _rows()
    del removed[0]["val_loss"]  # a key the after side lost: never allowed
    assert fc.compare_rows(_rows(), removed, allow_added=["val_loss"]).after == fc.MISSING


def test_digests_errors_and_meta():
    assert fc.compare_case("c", _record(_rows()), _record(_rows(), model="m2")).model is False
    assert fc.compare_case("c", _record(_rows()), _record(_rows(), state="s2")).state is False
    failed = fc.compare_case("c", _record(_rows()), {"rows": [], "error": "ImportError: x\ntraceback"})
    assert not failed.ok and failed.detail == "after side failed: ImportError: x"
    assert not fc.compare_case("c", None, _record(_rows())).ok
    meta = {"rows": [], "meta": {"params": {"mu": "0.1"}, "tags": {"variant": "full"}}, "error": None}
    other = {"rows": [], "meta": {"params": {"mu": "0.2"}, "tags": {"variant": "full"}}, "error": None}
    outcome = fc.compare_case("tune:full-000", meta, other)
    assert outcome.meta is False and "meta params.mu" in outcome.detail
    table = fc.format_table([outcome, fc.compare_case("c", _record(_rows()), _record(_rows()))])
    assert "FAIL" in table and "ok" in table


def test_timing_and_memory_metrics_are_left_out_of_the_tune_comparison():
    kept = ["val_acc", "train_loss", "clients_late", "best_round", "sv_effective_rank"]
    dropped = ["round_time_s", "wall_time_s", "sim_time", "peak_memory_mb", "eval_duration"]
    assert [n for n in kept + dropped if fc.is_untimed_metric(n)] == kept


def test_the_runner_flattens_a_report_only_where_it_is_a_dataclass():
    @dataclasses.dataclass(frozen=True)
    class Plain:
        round: int
        scalars: dict
        client_log: list
        divergence: str | None = None
        _cache: dict = dataclasses.field(default_factory=dict)

    @dataclasses.dataclass(frozen=True)
    class AsMapping(Mapping):  # a report that reads as its flat mapping: that view is taken as it is
        round: int

        def __getitem__(self, key):
            return {"round": self.round, "val_acc": 0.5}[key]

        def __iter__(self):
            return iter(("round", "val_acc"))

        def __len__(self):
            return 2

    log = [{"client": 0, "status": "trained"}]
    flat = runner.row_to_dict(Plain(1, {"val_acc": 0.5, "round_time_s": 0.1}, log))
    assert flat == {"round": 1, "val_acc": 0.5, "round_time_s": 0.1, "client_log": log}
    assert runner.untimed(flat) == {"round": 1, "val_acc": 0.5, "client_log": log}
    assert runner.row_to_dict(AsMapping(2)) == {"round": 2, "val_acc": 0.5}
    row = {"round": 1, "val_acc": 0.5}
    assert runner.row_to_dict(row) == row and runner.row_to_dict(row) is not row


def _run(params: dict) -> dict:
    return {"rows": [], "meta": {"status": "FINISHED", "params": dict(params), "tags": {}}, "error": None}


def test_a_parent_logs_its_trials_params_minus_the_searched_names():
    trial = {"rounds": "2", "method": "univarfl", "mu": "0.25", "eps": "0.02"}
    after = {
        "tune:full(parent)": _run({"rounds": "2", "method": "univarfl", "eps": "0.02", "search.mu": "{}"}),
        "tune:full-000": _run(trial),
    }
    before = {"tune:full(parent)": _run({"rounds": "2", "method": "univarfl", "synthetic.classes": "10"})}
    [outcome] = fc.check_parent_params(before, after)
    assert outcome.ok, outcome.detail
    assert "params" not in after["tune:full(parent)"]["meta"] and "params" not in before["tune:full(parent)"]["meta"]
    after["tune:full(parent)"]["meta"]["params"] = {"rounds": "3", "method": "univarfl", "search.mu": "{}"}
    [outcome] = fc.check_parent_params({}, after)  # eps missing, rounds differs from the trial's
    assert not outcome.ok and "full-000" in outcome.detail
    before = {"tune:full(parent)": _run({"rounds": "3"})}
    after["tune:full(parent)"]["meta"]["params"] = {"rounds": "2", "method": "univarfl", "eps": "0.02", "search.mu": 1}
    [outcome] = fc.check_parent_params(before, after)  # matches its trial, but changed a value the before side logged
    assert not outcome.ok and outcome.detail == "before and after differ on rounds"
