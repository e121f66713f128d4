"""benchmarks/client_time.py runs on a tiny protocol and its figures hang together: the kinds of a step's kernels
share out its whole time, the bare steps are part of a client round, both loads are timed. (Timings are the
benchmark's business, never a test's.)"""

from __future__ import annotations

import json

import pytest

from benchmarks import client_time


def test_a_tiny_run_reports_every_figure(tmp_path, capsys):
    out = tmp_path / "figures.json"
    assert client_time.main(["--clients", "2", "--image", "8", "--samples", "20", "--json", str(out)]) == 0
    found = json.loads(out.read_text())
    shares = [found["kernels"][kind] for kind in [*client_time.KINDS, "other"]]
    assert sum(shares) == pytest.approx(1.0) and found["kernels"]["convolution"] > 0
    assert 0 < found["client"]["bare_steps_ms"] and found["client"]["engine_share"] < 1
    assert found["client"]["load_weights_ms"] > 0 and found["client"]["load_state_dict_ms"] > 0
    assert found["pair"]["alone_ms"] > 0 and found["pair"]["together_ms"] > 0
    assert "the engine's own share" in capsys.readouterr().out


def test_sizes_below_one_are_refused(capsys):
    with pytest.raises(SystemExit):
        client_time.main(["--batch", "0"])
    assert "--batch: must be at least 1 (got 0)" in capsys.readouterr().err
