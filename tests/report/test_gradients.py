"""The gradient-norm tables (report/gradients.py): read back from a real MLflow store (tracking.store.prefixed_rounds),
averaged by hand."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from raytune_fl.report import gradients


def _table() -> pd.DataFrame:
    # two runs of "uv" (rounds 5 and 10), one of "avg" (cross-entropy only), in one setting; one "uv" run elsewhere
    rows = [
        ("uv", "a=1", 0, 5, {"grad_norm_ce": 2.0, "grad_norm_variance": 0.2, "grad_cos_variance": -0.5}),
        ("uv", "a=1", 0, 10, {"grad_norm_ce": 4.0, "grad_norm_variance": 0.2, "grad_cos_variance": -0.3}),
        ("uv", "a=1", 1, 5, {"grad_norm_ce": 2.0, "grad_norm_variance": 0.6, "grad_cos_variance": 0.1}),
        ("uv", "a=1", 1, 10, {"grad_norm_ce": 4.0, "grad_norm_variance": 1.0, "grad_cos_variance": -0.1}),
        ("avg", "a=1", 0, 5, {"grad_norm_ce": 3.0}),
        ("uv", "a=9", 0, 5, {"grad_norm_ce": 1.0, "grad_norm_variance": 5.0, "grad_cos_variance": 0.0}),
    ]
    return pd.DataFrame([{"variant": v, "setting": s, "seed": seed, "round": r, **m} for v, s, seed, r, m in rows])


def test_each_term_next_to_cross_entropy_by_hand():
    found = gradients.by_term(_table(), "a=1").set_index("variant")
    uv = found.loc["uv"]
    assert uv["term"] == "variance"
    assert uv["term_norm"] == pytest.approx((0.2 + 0.2 + 0.6 + 1.0) / 4)  # 0.5
    assert uv["ce_norm"] == pytest.approx(3.0)
    assert uv["ratio"] == pytest.approx(0.5 / 3.0)
    assert uv["cos"] == pytest.approx((-0.5 - 0.3 + 0.1 - 0.1) / 4)  # -0.2
    avg = found.loc["avg"]
    assert avg["term"] == "–" and math.isnan(avg["term_norm"]) and avg["ce_norm"] == 3.0


def test_the_ratio_round_by_round_is_taken_per_run_first():
    ratios = gradients.ratio_by_round(_table(), "a=1")
    assert list(ratios["variant"]) == ["uv"]  # avg has no term
    # round 5: 0.2/2 and 0.6/2 -> 0.2; round 10: 0.2/4 and 1.0/4 -> 0.15
    assert ratios.iloc[0][5] == pytest.approx(0.2)
    assert ratios.iloc[0][10] == pytest.approx(0.15)
    text = gradients.round_markdown(ratios)
    assert "| uv | variance | 0.2 | 0.15 |" in text


def test_the_markdown_table_shows_a_missing_term_as_a_dash():
    text = gradients.term_markdown(gradients.by_term(_table(), "a=9"))
    assert "| uv | variance | 5 | 1 | 5 | 0 |" in text
    text = gradients.term_markdown(gradients.by_term(_table(), "a=1"))
    assert "| avg | – | – | 3 | – | – |" in text


def test_histories_are_read_from_mlflow_round_by_round(tmp_path):
    from mlflow import MlflowClient

    from raytune_fl.tracking.store import prefixed_rounds

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.create_experiment("e", artifact_location=str(tmp_path / "artifacts"))
    run = client.create_run(experiment).info.run_id
    for step, ce in ((5, 2.0), (10, 4.0)):
        client.log_metric(run, "grad_norm_ce", ce, step=step)
        client.log_metric(run, "grad_norm_variance", ce / 10, step=step)
    client.log_metric(run, "val_acc", 0.5, step=10)  # not a gradient metric: not read
    plain = client.create_run(experiment).info.run_id  # a run without the diagnostic
    runs = pd.DataFrame(
        [
            {"run_id": run, "variant": "uv", "setting": "s", "seed": 0},
            {"run_id": plain, "variant": "avg", "setting": "s", "seed": 0},
        ]
    )

    def rounds_of(run_id: str) -> list[dict]:
        return prefixed_rounds(client, run_id, gradients.PREFIXES)

    table = gradients.histories(rounds_of, runs).sort_values("round")
    assert list(table["round"]) == [5, 10]
    assert list(table["grad_norm_ce"]) == [2.0, 4.0]
    assert list(table["grad_norm_variance"]) == pytest.approx([0.2, 0.4])
    assert set(table["variant"]) == {"uv"} and "val_acc" not in table.columns
    assert gradients.histories(rounds_of, runs[runs["variant"] == "avg"]).empty
