"""The cross-device preset (search_spaces/cross_device.yaml) has pfl-research's CIFAR-10 benchmark shape, and its
benchmark (benchmarks/cross_device.py) gives every way the same users, evaluates after the protocol's rounds, and
divides and extrapolates as its docstring says, checked by hand. (Timings are the benchmark's business, never a
test's.)"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import json
import sys

import pytest

from benchmarks import cross_device
from benchmarks.cross_device import Protocol, WayResult
from benchmarks.proc import MiB
from raytune_fl.config import load_space
from raytune_fl.engine.data import prepare_data
from tests.support import REPO

SPACE = REPO / "search_spaces" / "cross_device.yaml"
TINY = Protocol(users=20, samples_per_user=20, cohort=4, rounds=3, eval_every=2, image=(3, 8, 8), test_samples=200)


def test_the_cross_device_space_has_pfl_researchs_cifar10_shape():
    space = load_space(SPACE)
    base = space.base
    assert (base.dataset, base.synthetic.shape, base.synthetic.samples) == ("synthetic", (3, 32, 32), 50_000)
    assert (base.partition.kind, base.partition.clients, base.clients_per_round()) == ("iid", 1000, 50)
    assert (base.batch_size, base.local_epochs, base.rounds, base.eval_every) == (10, 1, 1500, 10)
    assert base.precision == "fp32" and base.checkpoint_every == 50
    assert {name: v.method for name, v in space.variants.items()} == {
        "fedavg": "fedavg",
        "fedprox": "fedprox",
        "scaffold": "scaffold",
        "univarfl": "univarfl",
    }
    assert set(space.variants["fedprox"].search) == {"mu"}
    assert set(space.variants["univarfl"].search) == {"mu", "lambda"}
    # each user's 50 images: 45 to train on (5 steps at batch 10, as pfl's 50 take), 5 held out for tuning
    data = prepare_data(base)
    assert {len(p) for p in data.train_parts} == {45} and {len(p) for p in data.val_parts} == {5}


def test_every_way_trains_the_users_the_engine_splits():
    engine = prepare_data(cross_device.engine_config(TINY))
    _, y_train, _, _, users = cross_device.protocol_data(TINY)
    assert [p.tolist() for p in engine.train_parts] == [u.tolist() for u in users]
    assert not any(len(v) for v in engine.val_parts)  # the whole share trains, as in the plain loop and pfl
    assert (engine.dataset.y_train == y_train).all()
    assert cross_device.engine_config(TINY).clients_per_round() == TINY.cohort
    cohorts = cross_device.cohorts(TINY)
    assert len(cohorts) == TINY.rounds and all(len(set(c)) == TINY.cohort for c in cohorts)
    assert TINY.eval_rounds() == [2, 3]  # every 2nd round and the last


def test_the_plain_and_inprocess_ways_run_a_tiny_protocol(tmp_path, capsys):
    out = tmp_path / "raw.json"
    args = [*TINY.flags(), "--ways", "plain,inprocess", "--reps", "1", "--threads", "1", "--json", str(out)]
    assert cross_device.main(args) == 0
    raw = json.loads(out.read_text())
    results = {r["way"]: r for r in raw["results"]}
    assert set(results) == {"plain", "inprocess"}
    for way, result in results.items():
        assert len(result["round_times"]) == TINY.rounds, way
        # eval_every: rounds between evaluations, the last always; the engine evaluates a run's first round too
        assert result["evaluated"] in ([2, 3], [1, 2, 3] if way == "inprocess" else None), way
        assert len(result["test_acc"]) == len(result["evaluated"]), way
        assert all(0.0 <= a <= 1.0 for a in result["test_acc"]), way
        assert result["peak_pss"] > 0 and result["wall_s"] > sum(result["round_times"]), way
    printed = capsys.readouterr().out
    assert "| plain |" in printed and "| inprocess |" in printed and "Machine: " in printed
    assert raw["protocol"]["users"] == 20 and raw["machine"]["cores"] >= 1


def _result(way: str, rep: int, train: float, evaluation: float, wall: float = 40.0) -> WayResult:
    # 6 rounds evaluated after 3 and 6; rounds 1-2 are warm-up
    times = [9.0, 9.0, evaluation, train, train, evaluation]
    return WayResult(way, rep, times, [3, 6], [0.5, 0.6], [0.2, 0.2], wall, 1024 * MiB, [3, 6])


def test_the_ratios_divide_by_plain_and_pfl_of_the_same_repetition():
    results = [
        _result("plain", 1, 1.0, 3.0),
        _result("pfl", 1, 2.0, 5.0),
        _result("inprocess", 1, 0.5, 2.5),
        _result("plain", 2, 2.0, 4.0),  # a slow repetition
        _result("pfl", 2, 2.0, 6.0),
        _result("inprocess", 2, 3.0, 4.5),
    ]
    rows = {row["way"]: row for row in cross_device.summarise(results, eval_every=10)}
    assert rows["inprocess"]["s_per_round"] == pytest.approx(1.75)  # the median of 0.5 and 3.0
    assert rows["inprocess"]["eval_round_s"] == pytest.approx(3.5)
    assert rows["inprocess"]["plain_ratio"] == pytest.approx((0.5 + 1.5) / 2)
    assert rows["inprocess"]["pfl_ratio"] == pytest.approx((0.25 + 1.5) / 2)
    assert rows["plain"]["plain_ratio"] == 1.0 and rows["pfl"]["pfl_ratio"] == 1.0
    # overhead (40 - 26 s) + the warm-up rounds' excess over two steady ones (18 - 2 s) + 1,350 training rounds
    # + 150 with evaluation
    assert results[0].warmup_excess_s == pytest.approx(16.0)
    assert results[0].extrapolated(10) == pytest.approx(14.0 + 16.0 + 1350 * 1.0 + 150 * 3.0)
    assert rows["plain"]["final_acc"] == [0.6, 0.6] and rows["plain"]["pss_mib"] == 1024
    table = cross_device.format_table(list(rows.values()))
    # each repetition's ratio beside the median: 0.5 and 1.5 of plain's, 0.25 and 1.5 of pfl's
    assert "| inprocess | 1.750 s | 3.500 s | 1.00 (0.50-1.50) | 0.88 (0.25-1.50) |" in table
    assert "| plain | 1.500 s | 3.500 s | 1.00 | " in table  # a way against itself: no range


def test_a_way_that_evaluates_every_round_is_extrapolated_as_such():
    times, rounds = [9.0, 9.0, 2.0, 2.0, 2.0, 2.0], [1, 2, 3, 4, 5, 6]
    every = WayResult("inprocess", 1, times, rounds, [0.1] * 6, [0.5] * 6, 30.0, 1, [3, 6])
    assert every.evaluates_every_round and every.per_round == every.eval_round == 2.0
    # warm-up: two evaluated rounds of 9 s where steady ones take 2 s
    assert every.extrapolated(10) == pytest.approx((30.0 - 26.0) + (18.0 - 4.0) + 1500 * 2.0)
    (row,) = cross_device.summarise([every], eval_every=10)
    table = cross_device.format_table([row])
    assert "| inprocess (evaluates every round) | 2.000 s | 2.000 s | - | - | 50.3 min | 0 MiB | 0.100 |" in table
    assert cross_device.full_run_evaluations(10) == 150 and cross_device.full_run_evaluations(7) == 215
    # the engine's first round evaluated beyond the protocol: one evaluation more, not every round
    first = WayResult("inprocess", 1, [9.0, 2.0, 5.0], [1, 2, 3], [0.1] * 3, [3.0] * 3, 20.0, 1, [2, 3], warmup=1)
    assert first.first_round_evaluated and not first.evaluates_every_round
    assert first.extrapolated(2) == pytest.approx((20.0 - 16.0) + (9.0 - 3.5) + (1500 - 751) * 3.5 + 751 * 3.5)


def test_an_unknown_way_is_refused(capsys):
    assert cross_device.main(["--ways", "plain,flower"]) == 2
    known = "plain, plain_cl, inprocess, actors, actors_sums, batched, bf16, pfl"
    assert f"unknown flower; known: {known}" in capsys.readouterr().err


def test_pfl_is_needed_only_by_its_way(tmp_path):
    importlib.import_module("benchmarks.pfl_way")  # imports pfl inside its function only
    python, why = cross_device.resolve_pfl_python(str(tmp_path / "python"))
    assert python is None and "no such interpreter" in why
    if importlib.util.find_spec("pfl") is None:  # this environment has none: the way is skipped, saying why
        python, why = cross_device.resolve_pfl_python(sys.executable)
        assert python is None and "pfl" in why


def test_the_device_reaches_every_way():
    """--device cuda travels to each way's child, puts the engine's actors on half the GPU each (the in-process ways
    on all of it), and is refused up front where torch sees no GPU."""
    protocol = dataclasses.replace(TINY, device="cuda")
    args = cross_device.build_parser().parse_args(protocol.flags())
    assert cross_device.protocol_of(args) == protocol
    actors = cross_device.engine_config(protocol, actors=2, partial_sums=True).resources
    alone = cross_device.engine_config(protocol, actors=0).resources
    assert (actors.device, actors.gpus_per_actor, alone.device, alone.gpus_per_actor) == ("cuda", 0.5, "cuda", 1.0)
    assert cross_device.engine_config(TINY, actors=2).resources.gpus_per_actor == 0.0  # the CPU: no GPU asked for


def test_cuda_is_refused_where_there_is_none(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert cross_device.main(["--device", "cuda", "--ways", "plain"]) == 2
    assert "--device cuda: torch sees no CUDA device here" in capsys.readouterr().err
