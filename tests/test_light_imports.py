"""Modules that processes load before they need torch stay free of it: a trial's process starts its client actors
before it imports torch (tune/trainable.py, actors/client.py), and validating a config must not import it either
unless a name is looked up (config.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("torch", "raytune_fl.engine.federation", "raytune_fl.models")


@pytest.mark.parametrize("module", ["raytune_fl.config", "raytune_fl.tune.trainable", "raytune_fl.actors.client"])
def test_importing_it_imports_no_torch(module):
    code = f"import sys, {module}; print([m for m in {HEAVY!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=Path.cwd())
    assert out.stdout.strip() == "[]"
