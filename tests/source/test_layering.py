"""The layering, checked on the source: which packages may import Ray, Ray Tune, Optuna, MLflow and plotly.

Every module under raytune_fl/, scripts/ and dashboards/ is parsed with `ast`; every import counts (module level,
inside functions, under `if TYPE_CHECKING:`, and `importlib.import_module("...")` / `__import__("...")` with a
literal name). A failure names the file, the line, the import and the rule it breaks.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCANNED = ("raytune_fl", "scripts", "dashboards", "benchmarks", "tools")

# ------------------------------------------------------------------------------------------------ the rules
#
# layer (a package, or a module) -> the libraries it may import. A module belongs to the longest layer that is
# its dotted name or a prefix of it; every module must belong to one. Libraries:
#   ray      Ray core (ray, ray.exceptions, ray.util, ...: anything of Ray that is not Tune/Train/AIR)
#   ray.tune Ray Tune (ray.tune, ray.train, ray.air)
#   optuna   Optuna (optuna, and Ray's ray.tune.search.optuna, which counts as ray.tune too)
#   mlflow   MLflow
#   plotly   plotly
LAYERS: dict[str, set[str]] = {
    "raytune_fl.tune": {"ray", "ray.tune", "optuna"},  # the variant study: Tune, its callbacks, the Optuna searcher
    "raytune_fl.ablation": {"ray.tune"},  # the ablation stage: cells as Tune trials
    "raytune_fl.runtime": {"ray", "optuna"},  # cluster.py (ray.init, queries), storage, the Optuna database
    "raytune_fl.export": {"ray.tune"},  # a trial's model from its Tune checkpoint, logged through tracking
    "raytune_fl.actors": {"ray"},  # the client actors: ray.remote, ray.wait, ray.get
    "raytune_fl.tracking": {"mlflow"},  # the only MLflow package: tag schema, writers, every read
    "raytune_fl.report": {"plotly"},  # figures, the dashboard; reads MLflow through tracking.store
    "dashboards": {"plotly"},
    # outside the package (tooling): a private local Ray cluster for an engine benchmark (ray.init/shutdown only,
    # see RAY_TASK_API), benchmarks/study.py reads its own throwaway MLflow store; tools/ drives a browser and
    # compares runs of two trees
    "benchmarks": {"ray", "mlflow"},
    "tools": {"mlflow"},
    "raytune_fl.engine": set(),  # the core: none of them (methods never import Ray)
    "raytune_fl.methods": set(),
    "raytune_fl.aggregators": set(),
    "raytune_fl.data": set(),
    "raytune_fl.models": set(),
    "raytune_fl.cli": set(),  # the command lines: Ray only through tune.cluster, MLflow only through tracking
    "raytune_fl": set(),  # config, registry, types, weights
    "scripts": set(),  # thin command lines
}
LIBRARIES = ("ray", "ray.tune", "optuna", "mlflow", "plotly")

# Ray core's task and actor API: only these layers call it. A layer allowed `ray` otherwise only starts or asks a
# cluster (ray.init, ray.shutdown, ray.is_initialized, ray.cluster_resources, ray.nodes, ...).
RAY_TASK_API = {"remote", "get", "wait", "put", "kill", "cancel", "get_actor", "method"}
RAY_TASK_API_LAYERS = {"raytune_fl.actors", "raytune_fl.tune"}

# Reads of the MLflow store: only these modules call them (tag names and filters stay in one place).
MLFLOW_READS = {"search_runs", "get_metric_history", "list_artifacts", "download_artifacts"}
MLFLOW_READERS = {
    "raytune_fl.tracking.store": "every read of results",
    "benchmarks.study": "exception: a benchmark reads the round times of its own throwaway store",
    "tools.frozen_compare": "exception: compares the runs two trees logged to their own throwaway stores",
}

# The package's layers, lowest first: a module imports its own package or a lower layer, never a higher one or a
# peer on its own rank (so every arrow of the import graph points down). Outside the package (benchmarks, tools,
# scripts, dashboards) anything may be imported; the package never imports them.
RANKS: list[tuple[str, ...]] = [
    ("raytune_fl.metrics",),  # the vocabulary: what a run reports, by name (standard library only)
    ("raytune_fl",),  # registry, types, weights, errors: plain Python and numpy
    # the math, the networks, the data sets, differential privacy's accountant and mechanisms
    ("raytune_fl.aggregators", "raytune_fl.models", "raytune_fl.data", "raytune_fl.privacy"),
    ("raytune_fl.methods",),  # specs, terms and hooks over aggregators and models
    ("raytune_fl.register",),  # the public registration functions plugins call (into the three registries above)
    ("raytune_fl.config",),  # experiments and search spaces, checked against the registries
    ("raytune_fl.devices",),  # which device a process trains on, from the resources config
    ("raytune_fl.engine",),  # one federated run: rounds, local training, evaluation
    ("raytune_fl.testing",),  # the plugin authors' harness: a method run through the engine as trials run it
    ("raytune_fl.tracking",),  # MLflow: what a run and a study log, every read
    ("raytune_fl.actors", "raytune_fl.runtime"),  # clients on Ray; the cluster, storage and the Optuna database
    ("raytune_fl.export",),  # a trial's model to MLflow
    ("raytune_fl.tune",),  # a variant's study
    ("raytune_fl.ablation",),  # best configuration x seeds x settings, and its table
    ("raytune_fl.report",),  # figures and the dashboard from what MLflow holds
    ("raytune_fl.cli",),  # the commands: console text, argument parsing
]


# ------------------------------------------------------------------------------------------------ the checker


@dataclass(frozen=True)
class Violation:
    path: str
    line: int
    what: str  # the import or call, as written
    rule: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}  -- {self.rule}"


def module_name(path: str) -> str:
    """raytune_fl/tune/study.py -> raytune_fl.tune.study; a package's __init__.py -> the package."""
    parts = list(Path(path).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> str | None:
    candidates = [layer for layer in LAYERS if module == layer or module.startswith(layer + ".")]
    return max(candidates, key=len, default=None)


def libraries(name: str) -> set[str]:
    """The libraries an imported module name belongs to (empty: none of the ruled ones)."""
    top = name.split(".")[0]
    if top in ("optuna", "mlflow", "plotly"):
        return {top}
    if top != "ray":
        return set()
    if name == "ray.tune.search.optuna" or name.startswith("ray.tune.search.optuna."):
        return {"ray.tune", "optuna"}
    if name.split(".")[1:2] in (["tune"], ["train"], ["air"]):
        return {"ray.tune"}
    return {"ray"}


def _imports(tree: ast.AST, path: str) -> list[tuple[int, str, str]]:
    """(line, imported module name, the statement as written) for every import in the tree."""
    module = module_name(path)
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.append((node.lineno, alias.name, f"import {alias.name}"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against the importing module's package
                parts = package.split(".")
                anchor = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                # `from ray import tune` imports ray.tune; `from ray import get` is ray's own name
                found.append((node.lineno, f"{base}.{alias.name}", f"from {base} import {alias.name}"))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func, name = node.func, node.args[0].value
            dynamic = (isinstance(func, ast.Name) and func.id == "__import__") or (
                isinstance(func, ast.Attribute) and func.attr == "import_module"
            )
            if dynamic and isinstance(name, str):
                found.append((node.lineno, name, f"import_module({name!r})"))
    return found


def _ray_names(tree: ast.AST) -> set[str]:
    """Names the module binds to Ray's top-level module (`import ray`, `import ray as r`, `import ray.tune`)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "ray" or (alias.asname is None and alias.name.startswith("ray.")):
                    names.add(alias.asname or "ray")
    return names


def check_source(path: str, source: str) -> list[Violation]:
    """The rules broken by one module (`path` relative to the repository, with forward slashes)."""
    module = module_name(path)
    layer = layer_of(module)
    if layer is None:
        return [Violation(path, 1, module, "no layer in LAYERS covers this module: add one")]
    tree = ast.parse(source, filename=path)
    allowed = LAYERS[layer]
    out = []
    for line, name, statement in _imports(tree, path):
        for library in sorted(libraries(name) - allowed):
            may = sorted(k for k, v in LAYERS.items() if library in v)
            out.append(
                Violation(
                    path,
                    line,
                    statement,
                    f"{layer} may not import {library} (it may import: {', '.join(sorted(allowed)) or 'none'}; "
                    f"{library} is for: {', '.join(may)})",
                )
            )
    if layer not in RAY_TASK_API_LAYERS:
        rule = f"Ray's task/actor API is for {', '.join(sorted(RAY_TASK_API_LAYERS))} only (not {layer})"
        ray = _ray_names(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                if node.value.id in ray and node.attr in RAY_TASK_API:
                    out.append(Violation(path, node.lineno, f"{node.value.id}.{node.attr}", rule))
            elif isinstance(node, ast.ImportFrom) and node.module == "ray" and not node.level:
                for alias in node.names:
                    if alias.name in RAY_TASK_API:
                        out.append(Violation(path, node.lineno, f"from ray import {alias.name}", rule))
    if module not in MLFLOW_READERS:
        rule = f"MLflow reads live in {', '.join(sorted(MLFLOW_READERS))} only"
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MLFLOW_READS:
                out.append(Violation(path, node.lineno, f".{node.func.attr}(...)", rule))
    return sorted(out, key=lambda v: (v.path, v.line, v.what))


def scanned_files() -> list[Path]:
    files = []
    for top in SCANNED:
        files.extend(p for p in sorted((REPO / top).rglob("*.py")) if "__pycache__" not in p.parts)
    return files


def check_repository() -> list[Violation]:
    out = []
    for file in scanned_files():
        out.extend(check_source(file.relative_to(REPO).as_posix(), file.read_text(encoding="utf-8")))
    return out


# ------------------------------------------------------------------------------------------------ the tests


def test_every_module_keeps_to_the_layering():
    violations = check_repository()
    assert not violations, "layering broken:\n" + "\n".join(map(str, violations))


def test_the_scan_sees_the_modules_and_their_imports():
    """Guards against a checker that passes because it reads nothing: the imports the layers are known to have
    are found where they are allowed."""
    files = {f.relative_to(REPO).as_posix() for f in scanned_files()}
    assert {"raytune_fl/tune/study.py", "raytune_fl/actors/pool.py", "scripts/tune.py", "dashboards/build.py"} <= files
    seen: dict[str, set[str]] = {}
    for file in scanned_files():
        path = file.relative_to(REPO).as_posix()
        for _, name, _ in _imports(ast.parse(file.read_text(encoding="utf-8")), path):
            for library in libraries(name):
                seen.setdefault(library, set()).add(layer_of(module_name(path)))
    assert {"raytune_fl.tune"} <= seen["ray.tune"] and {"raytune_fl.tune"} <= seen["optuna"]
    assert "raytune_fl.actors" in seen["ray"] and "raytune_fl.tracking" in seen["mlflow"]
    assert "raytune_fl.report" in seen["plotly"]


def test_the_rules_name_packages_modules_and_libraries_that_exist():
    for layer, allowed in LAYERS.items():
        base = REPO / Path(*layer.split("."))
        assert base.is_dir() or base.with_suffix(".py").is_file(), f"LAYERS has a stale entry: {layer}"
        assert allowed <= set(LIBRARIES), f"LAYERS[{layer!r}] names an unknown library: {allowed - set(LIBRARIES)}"
    assert RAY_TASK_API_LAYERS <= {layer for layer, allowed in LAYERS.items() if "ray" in allowed}
    for module in MLFLOW_READERS:
        assert (REPO / Path(*module.split("."))).with_suffix(".py").is_file(), f"stale MLFLOW_READERS: {module}"


@pytest.mark.parametrize(
    ("path", "source", "line", "fragment"),
    [
        ("raytune_fl/tracking/x.py", "import ray.tune\n", 1, "raytune_fl.tracking may not import ray.tune"),
        ("raytune_fl/tracking/x.py", "from ray import tune\n", 1, "raytune_fl.tracking may not import ray.tune"),
        ("raytune_fl/tracking/x.py", "import ray\n", 1, "raytune_fl.tracking may not import ray "),
        ("raytune_fl/methods/x.py", "def f():\n    import ray\n", 2, "raytune_fl.methods may not import ray "),
        (
            "raytune_fl/engine/x.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from mlflow.entities import Run\n",
            3,
            "raytune_fl.engine may not import mlflow",
        ),
        ("raytune_fl/report/x.py", "import optuna\n", 1, "raytune_fl.report may not import optuna"),
        ("raytune_fl/report/x.py", "import mlflow\n", 1, "raytune_fl.report may not import mlflow"),
        ("raytune_fl/data/x.py", "import plotly.express as px\n", 1, "raytune_fl.data may not import plotly"),
        ("raytune_fl/x.py", "import ray\n", 1, "raytune_fl may not import ray "),
        ("scripts/x.py", "import importlib\nimportlib.import_module('optuna')\n", 2, "scripts may not import optuna"),
        (
            "raytune_fl/actors/x.py",
            "from ray.tune.search.optuna import OptunaSearch\n",
            1,
            "raytune_fl.actors may not import ray.tune",
        ),
        ("benchmarks/x.py", "import ray\nray.get(ref)\n", 2, "task/actor API is for"),
        ("benchmarks/x.py", "from ray import remote\n", 1, "task/actor API is for"),
        ("raytune_fl/report/x.py", "def f(c):\n    return c.search_runs(['1'])\n", 2, "MLflow reads live in"),
        ("raytune_fl/tune/x.py", "def f(c, r):\n    c.download_artifacts(r, 'a')\n", 2, "MLflow reads live in"),
        ("raytune_fl/newpackage/x.py", "import ray\n", 1, "raytune_fl may not import ray "),  # no layer of its own
    ],
)
def test_the_checker_catches_a_forbidden_import(path, source, line, fragment):
    found = check_source(path, source)
    broken = [v for v in found if fragment in v.rule]
    assert broken, f"{fragment!r} not among the violations found in {path}: {list(map(str, found))}"
    assert (broken[0].path, broken[0].line) == (path, line)
    assert str(broken[0]).startswith(f"{path}:{line}: ")  # the failure message names the file, the line, the rule


def test_relative_imports_resolve_against_the_package():
    tree = ast.parse("from . import study\nfrom ..report import figures\n")
    assert [name for _, name, _ in _imports(tree, "raytune_fl/tune/x.py")] == [
        "raytune_fl.tune.study",
        "raytune_fl.report.figures",
    ]
    assert [name for _, name, _ in _imports(ast.parse("from .x import y\n"), "raytune_fl/tune/__init__.py")] == [
        "raytune_fl.tune.x.y"
    ]


def test_a_module_outside_every_layer_is_reported():
    found = check_source("elsewhere/x.py", "import os\n")
    assert len(found) == 1 and "no layer in LAYERS covers" in found[0].rule


@pytest.mark.parametrize(
    ("path", "source"),
    [
        ("raytune_fl/tune/x.py", "import optuna\nfrom ray import tune\nfrom ray.tune.search.optuna import S\n"),
        ("raytune_fl/actors/x.py", "import ray\n@ray.remote\nclass A: ...\nray.get(ray.put(1))\n"),
        ("raytune_fl/tracking/x.py", "from mlflow.tracking import MlflowClient\nimport pandas\n"),
        ("raytune_fl/report/x.py", "import plotly.graph_objects as go\nfrom raytune_fl.tune.space import f\n"),
        ("benchmarks/x.py", "import ray\nray.init(address='local')\nray.shutdown()\n"),
        ("raytune_fl/tracking/store.py", "def f(c):\n    return c.search_runs(['1'])\n"),
        ("raytune_fl/engine/x.py", "import torch\nfrom raytune_fl.methods import METHODS\n"),
    ],
)
def test_the_checker_lets_allowed_imports_through(path, source):
    assert check_source(path, source) == []


def import_graph(top: str) -> dict[str, set[str]]:
    """The module graph of one top-level folder (raytune_fl, benchmarks): every import of one of its modules, as
    `_imports` reads them (any level of the file, TYPE_CHECKING, relative imports and `import_module("...")` with a
    literal name included). An imported name points at the longest of the folder's modules that is it or a prefix
    of it (`from pkg import name`: pkg.name when that is a module, else pkg); a module's own packages are not
    counted (Python runs a package's __init__ before its modules by construction)."""
    modules = {module_name(p.relative_to(REPO).as_posix()) for p in (REPO / top).rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for path in (REPO / top).rglob("*.py"):
        relative = path.relative_to(REPO).as_posix()
        name = module_name(relative)
        for _, imported, _ in _imports(ast.parse(path.read_text(encoding="utf-8")), relative):
            target = _longest_module(imported, modules)
            if target is not None and target != name and not name.startswith(target + "."):
                graph[name].add(target)
    return graph


def _longest_module(imported: str, modules: set[str]) -> str | None:
    parts = imported.split(".")
    for end in range(len(parts), 0, -1):
        if (candidate := ".".join(parts[:end])) in modules:
            return candidate
    return None


def _package_imports() -> dict[str, set[str]]:
    return import_graph("raytune_fl")


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt, path + [nxt])):
                return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def rank_of(module: str) -> tuple[int, str]:
    """(rank, layer) of a raytune_fl module: the longest RANKS entry that is its name or a prefix of it. The
    package's own __init__ is the public API's facade (it re-exports, lazily, from every layer): above them all."""
    if module == "raytune_fl":
        return len(RANKS), "raytune_fl (the public API)"
    found = [(i, layer) for i, layers in enumerate(RANKS) for layer in layers
             if module == layer or module.startswith(layer + ".")]  # fmt: skip
    return max(found, key=lambda f: len(f[1]))


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a module on a higher rank, or on a peer's of the same rank, as 'a -> b (why)'."""
    out = []
    for module, targets in sorted(graph.items()):
        (rank, layer) = rank_of(module)
        for target in sorted(targets):
            (to_rank, to_layer) = rank_of(target)
            if to_rank > rank or (to_rank == rank and to_layer != layer):
                why = "up" if to_rank > rank else "a peer of the same rank"
                out.append(f"{module} -> {target} ({why}: {layer} is rank {rank}, {to_layer} rank {to_rank})")
    return out


def test_every_import_of_the_package_points_down():
    assert not (found := upward_imports(_package_imports())), "imports against RANKS:\n" + "\n".join(found)


def test_the_ranks_cover_every_package_once_and_nothing_else():
    listed = [layer for layers in RANKS for layer in layers]
    assert len(listed) == len(set(listed))
    packages = {f"raytune_fl.{p.name}" for p in (REPO / "raytune_fl").iterdir() if any(p.glob("*.py"))}
    modules = {"raytune_fl", "raytune_fl.devices", "raytune_fl.register"}  # top-level modules ranked on their own
    assert packages | modules == set(listed)


def test_the_package_never_imports_the_tooling_beside_it():
    for file in (REPO / "raytune_fl").rglob("*.py"):
        for _, name, statement in _imports(ast.parse(file.read_text()), file.relative_to(REPO).as_posix()):
            assert name.split(".")[0] not in ("benchmarks", "tools", "tests", "scripts", "dashboards"), (
                f"{file.relative_to(REPO)}: {statement}"
            )


def test_the_rank_check_finds_an_upward_and_a_sideways_import():
    graph = {
        "raytune_fl.config": {"raytune_fl.engine.lr_schedule", "raytune_fl.methods"},
        "raytune_fl.data.x": {"raytune_fl.models.y", "raytune_fl.registry"},
        "raytune_fl.cli.tune": {"raytune_fl.tune.study"},
    }
    assert upward_imports(graph) == [
        "raytune_fl.config -> raytune_fl.engine.lr_schedule (up: raytune_fl.config is rank 5, "
        "raytune_fl.engine rank 7)",
        "raytune_fl.data.x -> raytune_fl.models.y (a peer of the same rank: raytune_fl.data is rank 2, "
        "raytune_fl.models rank 2)",
    ]


def test_raytune_fl_has_no_import_cycle():
    cycle = _cycle(_package_imports())
    assert cycle is None, " -> ".join(cycle or [])


def test_the_package_has_no_arrow_up_and_no_circle():
    """The architecture's two numbers, counted as a reviewer counts them: 0 imports against RANKS (no special
    rank lets a module past the one above it: the vocabulary is a layer of its own, below config), 0 cycles."""
    graph = _package_imports()
    assert (len(upward_imports(graph)), _cycle(graph)) == (0, None)
    assert sum(map(len, graph.values())) > 500  # the graph is read: ~600 arrows between ~180 modules
    config = {m for m in graph if m == "raytune_fl.config" or m.startswith("raytune_fl.config.")}
    assert any("raytune_fl.metrics" in graph[m] for m in config)  # the arrow that was up, now down
    assert rank_of("raytune_fl.metrics") < rank_of("raytune_fl.errors") < rank_of("raytune_fl.config")


def test_benchmarks_have_no_import_cycle():
    graph = import_graph("benchmarks")
    assert "benchmarks.cross_device" in graph and "benchmarks.pfl_way" in graph
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_the_graph_reads_relative_and_dynamic_imports():
    assert "benchmarks.proc" in import_graph("benchmarks")["benchmarks.cross_device"]
    tree = ast.parse("from .y import f\nimportlib.import_module('raytune_fl.engine.local')\n")
    names = [name for _, name, _ in _imports(tree, "raytune_fl/testing/x.py")]
    modules = {"raytune_fl.testing.y", "raytune_fl.engine.local", "raytune_fl.engine"}
    assert [_longest_module(n, modules) for n in names] == ["raytune_fl.testing.y", "raytune_fl.engine.local"]


def test_the_cycle_finder_finds_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
