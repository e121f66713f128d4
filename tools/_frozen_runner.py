"""The per-tree half of tools/frozen_compare.py: runs seeded cases against ONE source tree and writes what they did.

tools/frozen_compare.py copies this file into a temporary folder and runs it once per tree with `PYTHONPATH=<tree>`
first, so this script must work against every tree it compares (the frozen revision and the refactored one): it
uses the standard library at import time and only `raytune_fl` APIs that the frozen revision (e5ca778) has. All the
code that touches the engine's API is in the section marked "ADAPT HERE" below.

    python _frozen_runner.py methods --tree TREE             # JSON list of the registered method names
    python _frozen_runner.py run --tree TREE --cases CASES.json --out OUT.json
    python _frozen_runner.py check --tree TREE               # only the import check

CASES.json: a list of {"name", "experiment" (overrides of the tiny experiment), "method", "params"}. OUT.json:
{"tree", "raytune_fl", "cases": {name: {"rows", "digests", "wall_s", "error"}}}: rows are the per-round metrics with
the timing keys (names ending in `_s`) removed, JSON-serialisable, nested lists/dicts (the client log) kept;
digests are sha256 over the final global model's arrays ("model") and over the whole final federation state
("state": weights, client states, aggregator, schedule), in order.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import os
import sys
import time
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

EXIT_WRONG_TREE = 3


def check_tree(tree: Path) -> str:
    """Imports raytune_fl and refuses (exit 3) unless it is the copy in `tree`; returns its __file__."""
    import raytune_fl

    found = Path(raytune_fl.__file__).resolve()
    print(f"raytune_fl from {found}", flush=True)
    if tree.resolve() not in found.parents:
        print(f"error: raytune_fl resolved to {found}, not inside the tree {tree.resolve()}", file=sys.stderr)
        sys.exit(EXIT_WRONG_TREE)
    return str(found)


# ============================================================================================ ADAPT HERE
# The only code here that touches raytune_fl's API (the rest is plain Python). It must run against both trees: if
# the refactor changes how a federation is built or run (Federation's module or arguments, round reports becoming a
# dataclass, the state it keeps), change these functions -- branch on what the tree offers, e.g.
# `hasattr(module, "NewName")` -- and keep what they return the same:
#   list_methods() -> the registered method names
#   build_and_run_case(spec) -> (rows as reported, the final global model {name: array}, the final state_dict)


def tiny_experiment_settings(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """tests/test_resume.py's `_experiment` at e5ca778 (copied, not imported: the runner needs no tests): the tiny
    4-client digits run. Overrides replace whole top-level keys, as there."""
    settings = {
        "dataset": "digits",
        "partition": {"kind": "dirichlet", "alpha": 0.5, "clients": 4, "min_size": 20},
        "rounds": 4,
        "batch_size": 32,
        "resources": {"actors": 0},
        "diagnostics": {"every": 2},
    }
    return {**settings, **overrides}


def list_methods() -> list[str]:
    from raytune_fl.methods import METHODS

    return list(METHODS)


def build_and_run_case(spec: Mapping[str, Any]) -> tuple[list[Any], Mapping[str, Any], Any]:
    """Builds one case's federation in process (no Ray), runs every round, returns (rows, final weights, state)."""
    from raytune_fl.config import ExperimentConfig
    from raytune_fl.engine.federation import Federation

    experiment = ExperimentConfig(**tiny_experiment_settings(spec["experiment"]))
    federation = Federation(experiment, spec["method"], dict(spec["params"]))
    rows: list[Any] = []
    federation.run(rows.append)
    return rows, federation.weights, federation.state_dict()


# ======================================================================================= END ADAPT HERE


def row_to_dict(row: Any) -> dict[str, Any]:
    """A round report as a flat dict of metrics, whatever the tree reports:
    - a Mapping (a dict, or a report class that reads as a mapping): its own flat view, dict(row);
    - only if it is a dataclass (and no mapping): its own flat form when it has one (to_result / as_dict / to_dict),
      else dataclasses.asdict flattened: dict-valued fields (e.g. `scalars`) merged into the top level, private
      (`_x`) and None-valued fields left out (a dict report has no key for what a round did not measure)."""
    if isinstance(row, Mapping):
        return dict(row)
    if dataclasses.is_dataclass(row) and not isinstance(row, type):
        for name in ("to_result", "as_dict", "to_dict"):
            method = getattr(row, name, None)
            if callable(method):
                return dict(method())
        flat: dict[str, Any] = {}
        for key, value in dataclasses.asdict(row).items():
            if key.startswith("_") or value is None:
                continue
            if isinstance(value, dict):
                flat.update(value)
            else:
                flat[key] = value
        return flat
    raise TypeError(f"a round report of type {type(row).__name__}: neither a mapping nor a dataclass")


def untimed(row: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if not str(k).endswith("_s")}


def jsonable(value: Any) -> Any:
    """Plain JSON types: numpy/torch scalars to Python numbers, arrays/tensors and tuples to lists, keys to str."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(dataclasses.asdict(value))
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "tolist"):  # numpy scalars and arrays, torch tensors
        return jsonable(value.tolist())
    if hasattr(value, "item"):
        return jsonable(value.item())
    return repr(value)


def _array_bytes(value: Any) -> tuple[str, tuple[int, ...], bytes] | None:
    """(dtype, shape, raw bytes) of a numpy array or torch tensor; None for anything else."""
    module = type(value).__module__
    if module.startswith("torch") and hasattr(value, "detach"):
        import torch

        tensor = value.detach().cpu().contiguous()
        raw = tensor.reshape(-1).view(torch.uint8).numpy().tobytes()
        return str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape), raw  # as numpy names it
    if module.startswith("numpy") and hasattr(value, "tobytes") and hasattr(value, "dtype"):
        import numpy as np

        array = np.ascontiguousarray(value)
        return str(array.dtype), tuple(array.shape), array.tobytes()
    return None


def digest(value: Any) -> str:
    """sha256 over a nested state in order: arrays/tensors by dtype, shape and bytes; dict keys in their order;
    dataclasses by class name (not module) and fields; floats by their exact bits."""
    h = hashlib.sha256()

    def feed(tag: str, payload: bytes = b"") -> None:
        h.update(tag.encode() + b":" + str(len(payload)).encode() + b":" + payload + b";")

    def walk(x: Any) -> None:
        arr = _array_bytes(x)
        if arr is not None:
            feed("array", f"{arr[0]}{arr[1]}".encode())
            feed("bytes", arr[2])
        elif x is None or isinstance(x, (bool, int, str)):
            feed(type(x).__name__, repr(x).encode())
        elif isinstance(x, float):
            feed("float", x.hex().encode() if math.isfinite(x) else repr(x).encode())
        elif isinstance(x, Mapping):
            feed("dict", str(len(x)).encode())
            for k, v in x.items():
                walk(k)
                walk(v)
        elif dataclasses.is_dataclass(x) and not isinstance(x, type):
            feed("dataclass", type(x).__name__.encode())
            for field in dataclasses.fields(x):
                walk(field.name)
                walk(getattr(x, field.name))
        elif isinstance(x, (list, tuple)):
            feed(type(x).__name__, str(len(x)).encode())
            for v in x:
                walk(v)
        else:  # an object this walk does not know: its repr (say so, a repr may hold an address)
            print(f"  note: digest of a {type(x).__name__} by its repr", flush=True)
            feed("repr", repr(x).encode())

    walk(value)
    return h.hexdigest()


def run_cases(specs: list[dict[str, Any]]) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)  # the comparison is bit for bit: one thread sums in one order
    results: dict[str, Any] = {}
    for spec in specs:
        started = time.perf_counter()
        try:
            rows, weights, state = build_and_run_case(spec)
            record = {
                "rows": [jsonable(untimed(row_to_dict(r))) for r in rows],
                "digests": {"model": digest(weights), "state": digest(state)},
                "error": None,
            }
        except Exception as error:  # recorded, the next case runs
            tail = "".join(traceback.format_exception(error)).strip().splitlines()[-6:]
            record = {"rows": [], "digests": {}, "error": f"{type(error).__name__}: {error}\n" + "\n".join(tail)}
        record["wall_s"] = round(time.perf_counter() - started, 3)
        results[spec["name"]] = record
        said = f"ERROR {record['error'].splitlines()[0]}" if record["error"] else f"{len(record['rows'])} rounds"
        print(f"case {spec['name']}: {said} ({record['wall_s']:.1f} s)", flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["methods", "run", "check"])
    parser.add_argument("--tree", type=Path, required=True, help="the source tree raytune_fl must come from")
    parser.add_argument("--cases", type=Path, help="run: the case specs (JSON list)")
    parser.add_argument("--out", type=Path, help="run/methods: where the JSON goes (methods: stdout if not given)")
    args = parser.parse_args(argv)
    found = check_tree(args.tree)
    if args.mode == "check":
        return 0
    if args.mode == "methods":
        text = json.dumps(list_methods())
        if args.out:
            args.out.write_text(text)
        else:
            print(text)
        return 0
    specs = json.loads(args.cases.read_text())
    results = run_cases(specs)
    payload = {"tree": str(args.tree), "raytune_fl": found, "pid": os.getpid(), "cases": results}
    args.out.write_text(json.dumps(payload, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
