"""Modules that processes load before they need torch stay free of it: a trial's process starts its client actors
before it imports torch (tune/trainable.py, actors/client.py), and validating a config must not import it either
unless a name is looked up (config)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("torch", "raytune_fl.engine.federation", "raytune_fl.models")


@pytest.mark.parametrize(
    "module",
    [
        "raytune_fl.config",
        "raytune_fl.tune.trainable",
        "raytune_fl.actors.client",
        "raytune_fl.metrics",  # the driver, the console and the dashboard name metrics with it
        "raytune_fl.engine.report",  # the driver's MLflow logging reads RoundReports and never trains
    ],
)
def test_importing_it_imports_no_torch(module):
    code = f"import sys, {module}; print([m for m in {HEAVY!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=Path.cwd())
    assert out.stdout.strip() == "[]"


METHOD_PROBE = """
import json, sys
from raytune_fl.methods import METHODS

homes = [f"raytune_fl.methods.{name}" for name in METHODS.names()]
early = [m for m in homes if m in sys.modules]  # the names are known before any method module loads
specs = [METHODS.get(name) for name in METHODS.names()]  # every method module imported: SPEC and build
heavy = sorted(m for m in sys.modules if m.split(".")[0] == "torch" or m.startswith("raytune_fl.methods.impl"))
print(json.dumps({"early": early, "loaded": [m for m in homes if m in sys.modules], "heavy": heavy}))
"""


def test_every_method_module_imports_no_torch():
    """A method's module (its SPEC and build) is torch-free; build imports the torch code from methods/impl/."""
    out = subprocess.run([sys.executable, "-c", METHOD_PROBE], capture_output=True, text=True, check=True)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["early"] == [] and len(seen["loaded"]) >= 24, seen
    assert seen["heavy"] == [], f"a method module imported torch or its code: {seen['heavy'][:5]}"
