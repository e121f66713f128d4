"""Issue 64: the client's local step is written once (engine/client_step.py) and run directly (engine/local.py) or
on stacked clients (engine/batched.py): the backward pass, `.backward(`, is in exactly one engine module."""

from __future__ import annotations

from pathlib import Path

from tests.support import REPO

ENGINE = REPO / "raytune_fl" / "engine"


def modules_with_backward(root: Path) -> list[str]:
    """The modules under `root` whose text holds `.backward(`, relative to it."""
    return sorted(str(path.relative_to(root)) for path in root.rglob("*.py") if ".backward(" in path.read_text())


def test_the_scan_sees_a_planted_backward_in_any_module(tmp_path):
    (tmp_path / "step.py").write_text("def step(loss):\n    loss.backward()\n")
    (tmp_path / "plain.py").write_text("def forward(x):\n    return x\n")
    (tmp_path / "deep").mkdir()
    (tmp_path / "deep" / "stacked.py").write_text("(losses * scale).sum().backward(retain_graph=True)\n")
    assert modules_with_backward(tmp_path) == ["deep/stacked.py", "step.py"]


def test_one_engine_module_runs_the_backward_pass():
    assert modules_with_backward(ENGINE) == ["client_step.py"]
