"""The engine never writes to the console: what it has to tell goes to its caller (a RoundReport through the round
callback, an exception, or a warning such as engine/federation.py's EngineNotice), which decides how to show it. A
trial's prints would otherwise land, unasked, in every program that runs a federation."""

from __future__ import annotations

import ast

import pytest

from tests.support import REPO

ENGINE = REPO / "raytune_fl" / "engine"
STREAMS = {"stdout", "stderr", "__stdout__", "__stderr__"}


def console_writes(source: str) -> list[tuple[int, str]]:
    """(line, what) for every print() call and every use of sys's standard streams (`sys.stderr`, `from sys import
    stdout`, ...)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
            found.append((node.lineno, "print(...)"))
        elif isinstance(node, ast.Attribute) and node.attr in STREAMS:
            if isinstance(node.value, ast.Name) and node.value.id == "sys":
                found.append((node.lineno, f"sys.{node.attr}"))
        elif isinstance(node, ast.ImportFrom) and node.module == "sys":
            found += [(node.lineno, f"from sys import {a.name}") for a in node.names if a.name in STREAMS]
    return found


def test_no_engine_module_prints_or_writes_to_the_standard_streams():
    modules = sorted(ENGINE.rglob("*.py"))
    assert ENGINE / "federation.py" in modules  # the scan sees the engine
    found = [
        f"{path.relative_to(REPO)}:{line}: {what}"
        for path in modules
        for line, what in console_writes(path.read_text(encoding="utf-8"))
    ]
    assert not found, "the engine reports through its caller (a warning, the round callback), never prints:\n" + (
        "\n".join(found)
    )


@pytest.mark.parametrize(
    ("source", "what"),
    [
        ("print('x')\n", "print(...)"),
        ("import sys\nprint('x', file=sys.stderr)\n", "print(...)"),
        ("import sys\nsys.stderr.write('x')\n", "sys.stderr"),
        ("import sys\nout = sys.__stdout__\n", "sys.__stdout__"),
        ("from sys import stderr\n", "from sys import stderr"),
    ],
)
def test_the_check_catches_each_way_of_writing(source, what):
    assert what in [w for _, w in console_writes(source)]


def test_the_check_lets_a_warning_and_other_sys_uses_through():
    source = "import sys, warnings\nwarnings.warn('x', UserWarning, stacklevel=2)\nsys.exit(0)\nlogger.info('x')\n"
    assert console_writes(source) == []
