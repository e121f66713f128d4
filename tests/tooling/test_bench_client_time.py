"""benchmarks/client_time.py's command line (its tiny end-to-end run is in tests/system/test_benchmarks.py)."""

from __future__ import annotations

import pytest

from benchmarks import client_time


def test_sizes_below_one_are_refused(capsys):
    with pytest.raises(SystemExit):
        client_time.main(["--batch", "0"])
    assert "--batch: must be at least 1 (got 0)" in capsys.readouterr().err
