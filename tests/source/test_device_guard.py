"""Tensors made where they are used, checked on the source: no torch factory call without `device=` in the code that
trains (raytune_fl/engine/, raytune_fl/methods/, raytune_fl/actors/).

A factory call without a device makes a CPU tensor. On a GPU that either crashes the first time it meets a CUDA
tensor (`engine/local.py` summed its per-step losses into CPU `torch.zeros`: every client failed on a GPU) or costs
a host-to-device copy where it is used. So every call of a function in FACTORIES, written `torch.zeros(...)` (or
through another name bound to torch) or `zeros(...)` after `from torch import zeros`, names its device: the device
of the tensors it combines with (`device=z.device`), or `device="cpu"` where a CPU tensor is meant. A site that is
CPU on purpose and cannot say so may instead be listed in EXEMPT with its reason. `torch.zeros_like` and the other
`*_like` functions inherit their argument's device, and `t.new_zeros(...)` a tensor's: neither is a factory here.
Every module under the guarded folders is parsed with `ast`; a failure names the file, the line, the call and the
rule it breaks.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import git_output

REPO = Path(__file__).resolve().parents[2]
GUARDED = ("raytune_fl/engine", "raytune_fl/methods", "raytune_fl/actors")

# ------------------------------------------------------------------------------------------------ the rules

# torch functions that make a new tensor on the default device (the CPU) unless given `device=`
FACTORIES = frozenset(
    {
        "zeros", "ones", "empty", "empty_strided", "full", "eye",  # filled
        "tensor", "as_tensor", "scalar_tensor",  # from data (as_tensor keeps a tensor's device, not an array's)
        "arange", "range", "linspace", "logspace",  # ranges
        "rand", "randn", "randint", "randperm",  # random (drawn from a CPU generator: device="cpu")
        "triu_indices", "tril_indices",  # index tensors
        # the legacy constructors: always the CPU unless given a device
        "Tensor", "FloatTensor", "DoubleTensor", "HalfTensor", "LongTensor", "IntTensor", "BoolTensor", "ByteTensor",
    }
)  # fmt: skip

# Sites that make a CPU tensor on purpose without saying so, by (file, enclosing function, call as written): the
# reason is the comment. A site is matched whatever its line, so edits elsewhere in the file do not break it; an
# entry whose function no longer calls that factory at all is stale and fails test_exemptions_are_not_stale.
EXEMPT: dict[tuple[str, str, str], str] = {
    # the clients' sample indices into the host arrays self.x / self.y (the object store's, never on a GPU): built
    # once per worker, and copied to the device once where the training set is uploaded
    ("raytune_fl/engine/worker.py", "ClientWorker.__init__", "torch.as_tensor"): "indices into host arrays",
}

RULE = "a torch factory without device= makes a CPU tensor: pass device= (the tensors' it meets, or 'cpu'), or EXEMPT"
RULE_NONE = "device=None is the default device (the CPU): name the device"


# ------------------------------------------------------------------------------------------------ the checker


@dataclass(frozen=True)
class Violation:
    path: str
    line: int
    what: str  # the call as written, e.g. torch.zeros
    where: str  # the enclosing function's qualified name, "<module>" at module level
    rule: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}(...) in {self.where}  -- {self.rule}"


@dataclass(frozen=True)
class FactoryCall:
    line: int
    what: str
    where: str
    device: ast.expr | None  # the device= keyword's value; None when it has none


def _torch_names(tree: ast.AST) -> tuple[set[str], dict[str, str]]:
    """Names bound to the torch module (`import torch`, `import torch as th`) and names bound to a factory
    (`from torch import zeros`, `from torch import zeros as z`: local name -> factory)."""
    modules, functions = set(), {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "torch":
                    modules.add(alias.asname or "torch")
                elif alias.name.startswith("torch.") and alias.asname is None:
                    modules.add("torch")  # `import torch.nn` binds torch too
        elif isinstance(node, ast.ImportFrom) and node.module == "torch" and not node.level:
            for alias in node.names:
                if alias.name in FACTORIES:
                    functions[alias.asname or alias.name] = alias.name
    return modules, functions


def factory_calls(source: str, path: str = "<string>") -> list[FactoryCall]:
    """Every call of a torch factory in `source`, with its enclosing function and its device= keyword."""
    tree = ast.parse(source, filename=path)
    modules, functions = _torch_names(tree)
    found: list[FactoryCall] = []

    def visit(node: ast.AST, scope: list[str]) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            scope = [*scope, node.name]
        if isinstance(node, ast.Call):
            func, what = node.func, None
            if (
                isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Name)
                and func.value.id in modules
                and func.attr in FACTORIES
            ):
                what = f"torch.{func.attr}"
            elif isinstance(func, ast.Name) and func.id in functions:
                what = f"torch.{functions[func.id]}"
            if what is not None:
                device = next((k.value for k in node.keywords if k.arg == "device"), None)
                found.append(FactoryCall(node.lineno, what, ".".join(scope) or "<module>", device))
        for child in ast.iter_child_nodes(node):
            visit(child, scope)

    visit(tree, [])
    return sorted(found, key=lambda c: (c.line, c.what))


def check_source(path: str, source: str, exempt: dict[tuple[str, str, str], str] = EXEMPT) -> list[Violation]:
    """The factory calls of one module (`path` relative to the repository) that name no device."""
    out = []
    for call in factory_calls(source, path):
        if (path, call.where, call.what) in exempt:
            continue
        if call.device is None:
            out.append(Violation(path, call.line, call.what, call.where, RULE))
        elif isinstance(call.device, ast.Constant) and call.device.value is None:
            out.append(Violation(path, call.line, call.what, call.where, RULE_NONE))
    return out


def guarded_files() -> list[Path]:
    files = []
    for top in GUARDED:
        files.extend(p for p in sorted((REPO / top).rglob("*.py")) if "__pycache__" not in p.parts)
    return files


def check_repository() -> list[Violation]:
    out = []
    for file in guarded_files():
        out.extend(check_source(file.relative_to(REPO).as_posix(), file.read_text(encoding="utf-8")))
    return out


# ------------------------------------------------------------------------------------------------ the tests


def test_every_torch_factory_in_the_training_code_names_its_device():
    violations = check_repository()
    assert not violations, "tensors made on the default device (the CPU):\n" + "\n".join(map(str, violations))


def test_the_scan_sees_the_guarded_modules_and_their_factories():
    """Guards against a checker that passes because it reads nothing: the factory calls the training code is known
    to make (with their devices) are found."""
    files = {f.relative_to(REPO).as_posix() for f in guarded_files()}
    assert {"raytune_fl/engine/local.py", "raytune_fl/methods/losses.py", "raytune_fl/actors/pool.py"} <= files
    seen = {
        (file.relative_to(REPO).as_posix(), call.what)
        for file in guarded_files()
        for call in factory_calls(file.read_text(encoding="utf-8"))
    }
    assert ("raytune_fl/engine/client_step.py", "torch.zeros") in seen  # the loss sums
    assert ("raytune_fl/methods/losses.py", "torch.triu_indices") in seen
    assert ("raytune_fl/methods/lipschitz.py", "torch.ones") in seen


def test_exemptions_are_not_stale():
    """Each EXEMPT entry names a file, a function in it and a factory that function still calls."""
    for (path, where, what), reason in EXEMPT.items():
        assert reason, f"EXEMPT[{path}, {where}, {what}] gives no reason"
        file = REPO / path
        assert file.is_file(), f"stale EXEMPT entry: no file {path}"
        assert path.startswith(tuple(f"{top}/" for top in GUARDED)), f"EXEMPT entry outside the guarded code: {path}"
        calls = {(c.where, c.what) for c in factory_calls(file.read_text(encoding="utf-8"), path)}
        assert (where, what) in calls, f"stale EXEMPT entry: {path}: {where} no longer calls {what}"


@pytest.mark.parametrize(
    ("source", "line", "what"),
    [
        ("import torch\nx = torch.zeros(3)\n", 2, "torch.zeros"),
        ("import torch\ndef f(z):\n    return torch.ones(2, dtype=z.dtype)\n", 3, "torch.ones"),
        ("import torch as th\nth.tensor(1.0)\n", 2, "torch.tensor"),
        ("from torch import zeros\nzeros(4)\n", 2, "torch.zeros"),
        ("from torch import arange as ar\nar(5)\n", 2, "torch.arange"),
        ("import torch.nn.functional as F\nimport torch.nn\ntorch.randperm(5)\n", 3, "torch.randperm"),
        ("import torch\nclass A:\n    def f(self):\n        return torch.full((2,), 1.0)\n", 4, "torch.full"),
        ("import torch\ntorch.as_tensor([1, 2], dtype=torch.long)\n", 2, "torch.as_tensor"),
        ("import torch\ntorch.empty(2, device=None)\n", 2, "torch.empty"),  # the default device, written out
        ("import torch\ntorch.randn(2, 3, generator=g)\n", 2, "torch.randn"),
        ("import torch\nf(g(torch.eye(3)))\n", 2, "torch.eye"),  # nested in other calls
    ],
)
def test_the_checker_catches_a_factory_without_a_device(source, line, what):
    found = check_source("raytune_fl/methods/x.py", source)
    assert [(v.line, v.what) for v in found] == [(line, what)], list(map(str, found))
    assert str(found[0]).startswith(f"raytune_fl/methods/x.py:{line}: {what}(...)")  # names the file, line, call


@pytest.mark.parametrize(
    "source",
    [
        "import torch\ndef f(z):\n    return torch.zeros(3, device=z.device)\n",
        "import torch\ntorch.randperm(5, generator=g, device='cpu')\n",  # CPU on purpose, said so
        "from torch import zeros\nzeros(4, dtype=torch.float64, device=x.device)\n",
        "import torch\ntorch.zeros_like(x)\ntorch.full_like(x, 2.0)\ntorch.empty_like(x)\n",  # inherit x's device
        "import torch\nx.new_zeros(3)\nx.new_tensor([1.0])\nx.new_full((2,), 1.0)\n",  # a tensor's own device
        "import numpy as np\nnp.zeros(3)\nnp.arange(4)\n",  # not torch
        "import torch\ny = torch.Tensor\nisinstance(v, torch.Tensor)\n",  # the type, not a call
        "zeros(3)\n",  # a zeros that is not torch's
        "import torch\ndef zeros(n):\n    return n\nzeros(3)\n",
    ],
)
def test_the_checker_lets_calls_with_a_device_through(source):
    assert check_source("raytune_fl/methods/x.py", source) == []


def test_an_exempt_site_is_let_through_and_only_that_site():
    source = "import torch\nclass W:\n    def __init__(self, ix):\n        self.ix = torch.as_tensor(ix)\n"
    exempt = {("raytune_fl/engine/x.py", "W.__init__", "torch.as_tensor"): "host indices"}
    assert check_source("raytune_fl/engine/x.py", source, exempt) == []
    assert len(check_source("raytune_fl/engine/y.py", source, exempt)) == 1  # another file
    other = source.replace("torch.as_tensor(ix)", "torch.tensor(ix)")
    assert len(check_source("raytune_fl/engine/x.py", other, exempt)) == 1  # another factory in that function


# The bug the guard is for (issue: every client crashed on a GPU): engine/local.py's loss accumulators, as the code
# stood before the fix.
LOCAL_BEFORE_THE_FIX = """
import torch

def train_local(model, method, x, y, settings, generator, num_classes, client=None, max_steps=None):
    names = ["loss", "ce"] + [f"term_{term.name}" for term in method.terms]
    sums = torch.zeros(len(names), dtype=torch.float64)
    counts = torch.zeros(len(names), dtype=torch.float64)  # a term is averaged over the steps it was on
    return sums, counts
"""
COMMIT_BEFORE_THE_FIX = "31f353e14c9aadb2096a118a8d1bf9498ae02616"  # see test_the_checker_catches_the_committed_bug


def test_the_checker_catches_the_cpu_loss_sums_of_the_local_loop():
    found = check_source("raytune_fl/engine/local.py", LOCAL_BEFORE_THE_FIX)
    assert [(v.line, v.what, v.where) for v in found] == [
        (6, "torch.zeros", "train_local"),
        (7, "torch.zeros", "train_local"),
    ]


def test_the_checker_catches_the_committed_bug():
    """The same check on engine/local.py as committed before the fix, when git has that commit."""
    source = git_output("show", f"{COMMIT_BEFORE_THE_FIX}:raytune_fl/engine/local.py", timeout=30)
    found = check_source("raytune_fl/engine/local.py", source)
    assert {(v.what, v.where) for v in found} >= {("torch.zeros", "train_local")}, list(map(str, found))
    assert sum(v.where == "train_local" for v in found) == 2
