"""The study's driver never imports torch. It checks a search space (dataset, model and method names, fixed
values, search ranges) against torch-free specs, draws the partition, and runs Tune and MLflow; only the trials
train. On 2 cores torch's import (~1.5-2 s of CPU) would otherwise delay Ray's start (README, Performance).

Names stay known without their code: the models' registry declares each name's module (imported on the first
build), and the methods' registry declares each method's module (its torch code is imported by `build`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from raytune_fl.registry import Registry, UnknownNameError

REPO = Path(__file__).resolve().parents[2]

# what a study's and an ablation's driver import, up to the trials (tune/trainable.py is pickled, not run, here)
DRIVER_MODULES = (
    "raytune_fl.cli.tune",
    "raytune_fl.cli.ablate",
    "raytune_fl.tune.study",
    "raytune_fl.tune.manifest",
    "raytune_fl.ablation.grid",
    "raytune_fl.ablation.sources",
    "raytune_fl.ablation.plan",
    "raytune_fl.ablation.trainable",
    "raytune_fl.export.trial_model",
    "raytune_fl.tune.trainable",
    "raytune_fl.tracking.tracker",
    "raytune_fl.tracking.trials",
)

PROBE = """
import importlib, json, sys
from pathlib import Path

def torch_modules():
    return sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))

for name in {modules!r}:
    importlib.import_module(name)
from raytune_fl.cli.common import check_data
from raytune_fl.config import load_space

spaces = sorted(Path({root!r}).rglob("*.yaml"))
for path in spaces:
    space = load_space(path)  # every name, fixed value and range checked
check_data(load_space(Path({root!r}) / "univarfl.yaml").base)  # the dataset loaded and partitioned
after_checks = torch_modules()

from raytune_fl.methods import build_method
from raytune_fl.models import build_model

build_model("simple_cnn", 1, 10, (28, 28))
build_method("fedprox", {{}}, 10)
print(json.dumps({{"spaces": len(spaces), "after_checks": after_checks, "after_builds": len(torch_modules())}}))
"""


def test_the_driver_checks_every_search_space_without_importing_torch():
    probe = PROBE.format(modules=DRIVER_MODULES, root=str(REPO / "search_spaces"))
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["spaces"] >= 10, seen  # the repository's search spaces, papers/ and protocols/ included
    assert seen["after_checks"] == [], f"the driver imported torch: {seen['after_checks'][:5]}"
    assert seen["after_builds"] > 0, "building a model and a method must import their code (and torch)"


def test_a_declared_name_is_known_before_its_module_loads_and_loaded_on_get(tmp_path, monkeypatch):
    things: Registry[int] = Registry("thing", homes={"one": "registry_home_probe"})
    (tmp_path / "registry_home_probe.py").write_text(
        "import sys\nsys.modules['registry_under_test'].register('one')(1)\n", encoding="utf-8"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(sys.modules, "registry_under_test", things)  # the home module registers into `things`
    monkeypatch.delitem(sys.modules, "registry_home_probe", raising=False)
    assert "one" in things and things.names() == ["one"] and "registry_home_probe" not in sys.modules
    assert things.get("one") == 1 and "registry_home_probe" in sys.modules


def test_a_registry_with_homes_refuses_an_undeclared_name_and_says_where_to_declare_it():
    things: Registry[int] = Registry("thing", homes={"one": "json"})
    with pytest.raises(ValueError, match="'two' is not declared in the registry's homes"):
        things.register("two")(2)
    with pytest.raises(UnknownNameError, match="unknown thing 'one'; known: one"):  # its home did not register it
        things.get("one")
