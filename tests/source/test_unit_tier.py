"""The unit tier (`python -m pytest -q -m unit`) checked from outside: its collection imports no ray, its declarations
name real modules, and every module of the package is imported by a unit test or declared uncovered with the
reason. (Inside a unit run the root conftest checks each test: no ray, no process left running, a CPU budget.)"""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

from tests.support import REPO
from tests.support.tiers import HEAVY_FIXTURES, TESTS, declared_not_covered, declared_not_unit

PACKAGE = REPO / "raytune_fl"

# the collection of the unit tier, reports which heavy modules it loaded: ray must not be among them
PROBE = """
import sys
import pytest

class Loaded:
    def pytest_collection_finish(self, session):
        heavy = sorted(m for m in ("ray", "mlflow.server") if m in sys.modules)
        print("LOADED", heavy)

code = pytest.main(["-q", "-m", "unit", "--co", "-p", "no:cacheprovider"], plugins=[Loaded()])
sys.exit(int(code))
"""


@pytest.fixture(scope="module")
def unit_collection() -> list[str]:
    """The unit tier's test ids, collected as `python -m pytest -q -m unit --co` does (in a fresh process)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "LOADED []" in done.stdout, [line for line in done.stdout.splitlines() if line.startswith("LOADED")]
    return [line for line in done.stdout.splitlines() if "::" in line]


def _module_of(test_id: str) -> str:
    return test_id.split("::")[0]


def _imported_package_modules(path) -> set[str]:
    """The raytune_fl modules a test module imports (at any depth: a test may import inside its function)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("raytune_fl"):
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)  # `from raytune_fl.x import y`
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("raytune_fl"))
    return found | {module for name in found for module in _reexported(name)}


def _reexported(module: str) -> set[str]:
    """The submodules a package's __init__ re-exports from (`from raytune_fl.config.space import SearchSpace`): a
    test of `raytune_fl.config`'s public names tests them."""
    init = REPO / module.replace(".", "/") / "__init__.py"
    if not init.is_file():
        return set()
    return {
        node.module
        for node in ast.walk(ast.parse(init.read_text()))
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith(module + ".")
    }


def _package_modules() -> set[str]:
    """Every module of the package with code: raytune_fl.x.y for raytune_fl/x/y.py (a package's __init__ as x)."""
    modules = set()
    for path in PACKAGE.rglob("*.py"):
        if path.name == "__init__.py" and not ast.parse(path.read_text()).body:
            continue
        parts = path.relative_to(REPO).with_suffix("").parts
        modules.add(".".join(parts[:-1] if path.name == "__init__.py" else parts))
    return modules


def test_the_unit_tier_is_most_of_the_suite_and_lies_outside_the_slow_tier(unit_collection):
    assert len(unit_collection) >= 500, f"only {len(unit_collection)} unit tests: the rule lost them"
    modules = {_module_of(test_id) for test_id in unit_collection}
    assert not {m for m in modules if m.startswith("tests/system/")}, "the slow tier is never unit"
    tests = {test_id.split("[")[0] for test_id in unit_collection} | set(unit_collection)
    declared = {f"tests/{entry}" for entry in declared_not_unit()}
    collected = sorted((modules | tests) & declared)
    assert not collected, f"NOT_UNIT declares these, yet they were collected as unit: {collected}"


def _defined_names(path) -> set[str]:
    return {node.name for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.FunctionDef)}


def test_the_declarations_name_real_things_with_their_reasons():
    for entry, reason in declared_not_unit().items():
        module, _, name = entry.partition("::")
        path = TESTS / module
        assert path.is_file(), f"NOT_UNIT names {module}, which is not a test module (moved? renamed?)"
        defined = not name or name.split("[")[0] in _defined_names(path)
        assert defined, f"NOT_UNIT names {entry}, which {module} does not define"
        assert reason.strip(), f"{entry}: say why it is not unit"
    package = _package_modules()
    for module, reason in declared_not_covered().items():
        assert module in package, f"NOT_COVERED names {module}, which is no module of raytune_fl (moved? renamed?)"
        assert reason.strip(), f"{module}: say why no unit test covers it"
    sources = "".join(p.read_text() for p in (TESTS / "conftest.py", TESTS / "support" / "fixtures.py"))
    for fixture in HEAVY_FIXTURES:
        assert f"def {fixture}(" in sources, f"HEAVY_FIXTURES names {fixture}, which no shared fixture defines"


def test_every_module_of_the_package_has_a_unit_test_or_says_why_not(unit_collection):
    """The tier covers every module's pure logic: a module is covered when a unit test module imports it."""
    covered = set()
    for module in {_module_of(test_id) for test_id in unit_collection}:
        covered |= _imported_package_modules(REPO / module)
    package = _package_modules()
    uncovered = sorted(package - covered - set(declared_not_covered()))
    assert not uncovered, f"no unit test imports {uncovered}: add one, or declare it in tiers.py NOT_COVERED"
    stale = sorted(set(declared_not_covered()) & covered)
    assert not stale, f"NOT_COVERED declares {stale}, which a unit test now covers: remove the declaration"
