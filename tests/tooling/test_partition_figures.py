"""tools/partition_figures.py and the page it draws for (docs/how-to/choose-heterogeneity.md): every figure is on
the page and in the folder, every horizontal Flower partitioner is named there, and a drawn split is the engine's."""

from __future__ import annotations

import numpy as np
import pytest

from tools import partition_figures as figures

pytest.importorskip("flwr_datasets")  # imported at collection: its import (seconds) is no one test's cost
PAGE = figures.REPO / "docs" / "how-to" / "choose-heterogeneity.md"


def test_every_figure_is_drawn_committed_and_shown_and_no_other():
    page = PAGE.read_text()
    committed = {path.stem for path in figures.FOLDER.glob("*.png")}
    assert committed == set(figures.FIGURES), "run python -m tools.partition_figures --write"
    for stem in figures.FIGURES:
        assert f"(heterogeneity/{stem}.png)" in page, stem


def test_the_page_names_every_horizontal_flower_partitioner():
    from raytune_fl.data.flwr import horizontal_partitioners

    page = PAGE.read_text()
    assert [name for name in horizontal_partitioners() if f"`{name}`" not in page] == []


def test_a_figure_draws_the_split_the_engine_makes(tmp_path):
    clients, classes = figures.split(figures.FIGURES["flwr-PathologicalPartitioner"])
    assert len(clients) == figures.CLIENTS and classes == 10
    assert [len(np.unique(labels)) for labels in clients] == [2] * 10  # num_classes_per_partition: 2
    clients, _ = figures.split(figures.FIGURES["shards"])
    assert sum(map(len, clients)) == 1437  # digits' training split, every sample once
    # 20 sorted shards of 71-72 samples, 2 a client: a shard straddles at most one class boundary
    assert sorted(map(len, clients)) == [142, 143] + [144] * 8 and max(len(np.unique(c)) for c in clients) <= 4
    path = figures.draw("shards", tmp_path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_it_redraws_the_docs_only_when_told(capsys):
    with pytest.raises(SystemExit):
        figures.main([])
    assert "--write" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        figures.main(["--out", "/tmp/x", "nope"])
    assert "unknown figure 'nope'" in capsys.readouterr().err
