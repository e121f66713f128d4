"""Security defaults: YAML is safe-loaded (no object construction); checkpoints load weights-only
(tests/engine/test_checkpoint.py)."""

from __future__ import annotations

import pytest

from raytune_fl.cli import main
from raytune_fl.config import ConfigError, load_space
from tests.support import REPO


def test_a_yaml_file_cannot_run_code(tmp_path, capsys):
    marker = tmp_path / "pwned"
    space = tmp_path / "evil.yaml"
    space.write_text(f'name: !!python/object/apply:os.system ["touch {marker}"]\nvariants: {{a: {{method: fedavg}}}}\n')
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_space(space)
    assert main(["--space", str(space), "--storage", str(tmp_path / "ray")]) == 2
    assert "not valid YAML" in capsys.readouterr().err
    assert not marker.exists()


def test_a_set_value_cannot_run_code(tmp_path, capsys):
    marker = tmp_path / "pwned"
    args = ["--space", str(REPO / "search_spaces" / "fedprox.yaml"), "--storage", str(tmp_path / "ray")]
    args += ["--set", f'name=!!python/object/apply:os.system ["touch {marker}"]']
    assert main(args) == 2
    assert "--set name" in capsys.readouterr().err
    assert not marker.exists()
