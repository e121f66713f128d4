"""The package stays a composition of small named parts: no function over 60 lines (signature and docstring
included), so each reads in one screen and is tested on its own, and none with more than 7 parameters (self and
cls not counted), so a clump of values that travels together gets a name (a frozen dataclass) instead."""

from __future__ import annotations

import ast

from tests.support import REPO

LIMIT = 60
MAX_PARAMETERS = 7
PACKAGE = "raytune_fl"


def _functions(source: str):
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def long_functions(source: str, path: str, limit: int = LIMIT) -> list[str]:
    found = []
    for node in _functions(source):
        length = node.end_lineno - node.lineno + 1
        if length > limit:
            found.append(f"{path}:{node.lineno}: {node.name} is {length} lines (at most {limit})")
    return found


def parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """Every parameter a caller can pass (positional, keyword-only, *args, **kwargs), self and cls not counted."""
    args = node.args
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    names += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
    return [name for name in names if name not in ("self", "cls")]


def wide_functions(source: str, path: str, limit: int = MAX_PARAMETERS) -> list[str]:
    found = []
    for node in _functions(source):
        count = len(parameters(node))
        if count > limit:
            found.append(f"{path}:{node.lineno}: {node.name} takes {count} parameters (at most {limit})")
    return found


def _package_files():
    files = sorted((REPO / PACKAGE).rglob("*.py"))
    assert len(files) >= 100
    return [(path.read_text(), str(path.relative_to(REPO))) for path in files]


def test_the_checker_counts_a_function_from_its_def_to_its_last_line():
    body = "def f():\n" + "    x = 1\n" * 60
    assert long_functions(body, "f.py") == ["f.py:1: f is 61 lines (at most 60)"]
    assert long_functions(body, "f.py", limit=61) == []


def test_the_checker_counts_every_parameter_but_self_and_cls():
    source = (
        "class C:\n    def m(self, a, /, b, *args, c, d=1, **kwargs): ...\n    @classmethod\n    def k(cls, a): ...\n"
    )
    assert wide_functions(source, "c.py", limit=5) == ["c.py:2: m takes 6 parameters (at most 5)"]
    assert wide_functions(source, "c.py", limit=6) == []
    eight = "def f(a, b, c, d, e, f, g, *, h=None): ...\n"
    assert wide_functions(eight, "f.py") == ["f.py:1: f takes 8 parameters (at most 7)"]
    assert wide_functions("def f(a, b, c, d, e, f, g): ...\n", "f.py") == []


def test_no_function_of_the_package_is_over_the_limit():
    found = [line for source, path in _package_files() for line in long_functions(source, path)]
    assert not found, "\n".join(found)


def test_no_function_of_the_package_takes_more_than_seven_parameters():
    found = [line for source, path in _package_files() for line in wide_functions(source, path)]
    assert not found, "\n".join(found)
