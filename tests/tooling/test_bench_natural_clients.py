"""benchmarks/natural_clients.py: the steady round time, the table's per-repetition ratios, the two ways' configs
(one client per writer, and the same sizes split IID) and the flags; the data it writes, on a tiny folder."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import natural_clients as bench


def test_the_steady_round_time_leaves_out_the_warm_up_and_the_evaluating_rounds():
    # round 1 (evaluates, warm-up), round 2 (warm-up), rounds 3-5 steady, round 6 evaluates
    assert bench.steady([9.0, 5.0, 1.0, 3.0, 2.0, 7.0], warmup=2) == 2.0
    assert bench.steady([9.0, 1.0, 3.0, 7.0], warmup=0) == 2.0  # round 1 evaluates: out even without warm-up


def test_the_ratio_is_taken_within_each_repetition_and_its_range_shown():
    runs = [
        {"rep": 1, "way": "arrays", "s_per_round": 2.0, "data_s": 0.1, "clients": 4},
        {"rep": 1, "way": "natural", "s_per_round": 2.2, "data_s": 3.0, "clients": 4},
        {"rep": 2, "way": "arrays", "s_per_round": 4.0, "data_s": 0.3, "clients": 4},
        {"rep": 2, "way": "natural", "s_per_round": 4.0, "data_s": 5.0, "clients": 4},
    ]
    lines = bench.table(runs).splitlines()
    assert lines[2] == "| arrays | 4 | 3.000 (2.000-4.000) | 0.2 | 1 |"
    assert lines[3] == "| natural | 4 | 3.100 (2.200-4.000) | 4.0 | 1.050 (1.000-1.100) |"  # 1.1 and 1.0


def test_the_data_and_both_ways_configs(tmp_path):
    pytest.importorskip("datasets")
    bench.write_data(tmp_path, writers=10, per_writer=20, test_images=20)
    with np.load(tmp_path / "arrays.npz") as arrays:
        assert arrays["x_train"].shape == (200, 1, 28, 28) and arrays["x_test"].shape == (20, 1, 28, 28)
    natural = bench.experiment("natural", tmp_path, 10, 20, rounds=5)
    assert natural.partition.partitioner == "NaturalIdPartitioner" and natural.dataset == "hf"
    arrays = bench.experiment("arrays", tmp_path, 10, 20, rounds=5)
    assert (arrays.partition.kind, arrays.partition.clients, arrays.partition.min_size) == ("iid", 10, 20)
    from raytune_fl.engine.data import prepare_data

    data = prepare_data(natural)  # one client per writer, each holding that writer's 20 images
    assert data.num_clients == 10 and sorted(map(len, data.client_parts)) == [20] * 10


@pytest.mark.parametrize(
    ("argv", "first"),
    [(["--writers", "10"], "--writers"), (["--reps", "0"], "--reps"), (["--rounds", "4"], "--rounds")],
)
def test_bad_flags_are_named(argv, first, capsys):
    with pytest.raises(SystemExit):
        bench.parse_args(argv)
    assert f"error: {first}" in capsys.readouterr().err
