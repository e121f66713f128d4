"""The tests' own layout, checked on the files: tests/ mirrors the package, the slow tier is a directory and the
unit tier one rule, one conformance module per registry, and test modules share code only through tests/support."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support import REPO
from tests.support.tiers import declared_not_unit, is_unit

TESTS = REPO / "tests"
PACKAGE = REPO / "raytune_fl"
# folders that are not a package's: helpers, the slow tier, whole-tree checks, the tooling beside the package
# (benchmarks/, tools/), and one conformance module per registry
OWN_FOLDERS = {"support", "system", "source", "tooling", "conformance"}


def _test_modules() -> list[Path]:
    return sorted(p for p in TESTS.rglob("test_*.py") if "support" not in p.relative_to(TESTS).parts)


def _registry_kinds() -> dict[str, Path]:
    """Every `Registry("kind", ...)` the package builds: kind -> the module that builds it."""
    kinds = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Registry" and node.args:
                kinds[node.args[0].value] = path
    return kinds


def test_every_test_folder_is_a_package_of_raytune_fl_or_one_of_the_own_folders():
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and p.name[0] not in "._"}
    packages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and any(p.glob("*.py"))}
    assert folders - packages - OWN_FOLDERS == set(), "name a test folder after the package it tests"
    for folder in folders:
        assert (TESTS / folder / "__init__.py").exists(), f"tests/{folder} needs an __init__.py (unique module names)"


def test_a_test_module_at_the_top_is_named_after_a_top_level_module():
    for path in TESTS.glob("test_*.py"):
        module = path.stem.removeprefix("test_")
        assert (PACKAGE / f"{module}.py").exists(), f"{path.name}: no raytune_fl/{module}.py; move it to its package"


def test_the_tiers_are_decided_in_one_place_and_no_test_marks_itself():
    """slow: the tests/system/ folder; unit: the rule of tests/support/tiers.py (no Ray, server or training)."""
    where = {"slow": "a slow test goes in tests/system/", "unit": "tests/support/tiers.py decides which tests are unit"}
    for path in _test_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            tier = getattr(node, "attr", None) if isinstance(node, ast.Attribute) else None
            marks = tier in where and getattr(node.value, "attr", "") == "mark"
            assert not marks, f"{path.relative_to(REPO)}:{node.lineno}: {where[tier]} instead"


def test_the_tiers_do_not_overlap():
    assert is_unit("tests/methods/test_fedprox.py::test_x[a]", ["tmp_path"]), "a test with plain fixtures is unit"
    assert not is_unit("tests/system/test_quickstart.py::test_x", []), "the slow tier is never unit"
    assert not is_unit("tests/methods/test_fedprox.py::test_x", ["ray_cluster"]), "a test on Ray is not unit"
    for entry in declared_not_unit():
        case = entry if "[" in entry else f"{entry}[p]" if "::" in entry else f"{entry}::test_x[p]"
        assert not is_unit(f"tests/{case}", []), entry
        assert not entry.startswith("system/"), f"NOT_UNIT declares {entry}: tests/system/ is left out already"


def test_test_modules_import_no_other_test_module():
    for path in _test_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                where = path.relative_to(REPO)
                assert node.level == 0, f"{where}: a relative import; shared code goes in tests/support"
                module = node.module or ""
                assert not module.startswith("tests.") or module.startswith("tests.support"), f"{where}: {module}"


def test_every_registry_has_its_conformance_module():
    kinds = _registry_kinds()
    assert {"method", "model", "dataset", "partitioner"} <= set(kinds), kinds  # the scan sees them
    for kind, path in kinds.items():
        module = TESTS / "conformance" / f"test_{kind}s.py"
        assert module.exists(), f"the {kind} registry ({path.relative_to(REPO)}) has no {module.relative_to(REPO)}"
    conformance = {p.stem.removeprefix("test_") for p in (TESTS / "conformance").glob("test_*.py")}
    assert conformance == {f"{kind}s" for kind in kinds}, "one conformance module per registry, no other"
