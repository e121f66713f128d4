"""The study driver stays a composition of small named parts: no function in tune/ or ablation/ over 60 lines
(signature and docstring included), so each reads in one screen and is tested on its own."""

from __future__ import annotations

import ast

from tests.support import REPO

LIMIT = 60
PACKAGES = ("raytune_fl/tune", "raytune_fl/ablation")


def long_functions(source: str, path: str, limit: int = LIMIT) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            if length > limit:
                found.append(f"{path}:{node.lineno}: {node.name} is {length} lines (at most {limit})")
    return found


def test_the_checker_counts_a_function_from_its_def_to_its_last_line():
    body = "def f():\n" + "    x = 1\n" * 60
    assert long_functions(body, "f.py") == ["f.py:1: f is 61 lines (at most 60)"]
    assert long_functions(body, "f.py", limit=61) == []


def test_no_function_of_the_study_driver_is_over_the_limit():
    files = [path for package in PACKAGES for path in sorted((REPO / package).rglob("*.py"))]
    assert len(files) >= 10
    found = [line for path in files for line in long_functions(path.read_text(), str(path.relative_to(REPO)))]
    assert not found, "\n".join(found)
