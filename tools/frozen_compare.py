#!/usr/bin/env python
"""Frozen-copy comparison: do seeded runs give the same per-round metrics before and after a refactor?

The "before" side is a frozen copy of the code at a git revision (`git archive REV | tar -x` into a temporary
folder; default e5ca778, the commit before the refactor); the "after" side is a source tree (default: this
repository's working tree). Each side runs the same seeded cases in its own subprocess, with PYTHONPATH=<tree>
first (the runner refuses to run unless `import raytune_fl` resolves inside that tree) and one torch thread, and
records per case the per-round metric rows (timing keys, names ending in `_s`, removed; nested client logs kept)
and sha256 digests of the final global model and of the whole final federation state. The two sides are then
compared case by case, exactly: the same keys, the same JSON types, floats equal bit for bit.

Cases (`--list`):
  engine cases     tests/engine/test_schedules.py's CASES at e5ca778 on its tiny 4-client digits experiment, except the
                   two faults-* cases (they need that test's in-process pool factory with injected faults)
  method:<name>    every method registered in the BEFORE tree's raytune_fl.methods.METHODS, with its defaults,
                   2 rounds of the same experiment (a method missing on either side is reported)
  tune             (--with-tune) the real `python scripts/tune.py --space <tiny space>` in each tree: 2 rounds,
                   2 trials of a searched variant + 1 of a fixed one, seed 0, one trial at a time, 2 client
                   actors, a SQLite MLflow store and Optuna storage in a temporary folder; then every run's params,
                   tags and metric histories (timing/memory metrics left out) are compared, trial runs matched by
                   name (<variant>-<trial number>), their params compared too

Exit status: 0 only if every selected case matches; 1 if any differs or failed; 2 on a setup error.

  python tools/frozen_compare.py                       # engine + method cases, e5ca778 vs the working tree
  python tools/frozen_compare.py --with-tune
  python tools/frozen_compare.py --cases fedavg,'method:fed*' --allow-added-keys new_metric
  python tools/frozen_compare.py --after-rev HEAD      # or --after /path/to/another/tree
  python tools/frozen_compare.py --base 12bd35b --with-tune --cases tune --parent-params-from-trials
                                                       # issue 49's record builder: parents log their trials' params
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

REPO = Path(__file__).resolve().parents[1]
RUNNER = Path(__file__).resolve().with_name("_frozen_runner.py")
DEFAULT_BASE = "e5ca778"  # the commit before the refactor
METHOD_ROUNDS = 2
TUNE_CASE = "tune"
TUNE_TIMEOUT_S = 900

# tests/engine/test_schedules.py's CASES at e5ca778: name -> (overrides of test_resume._experiment(), method, params)
ENGINE_CASES: dict[str, tuple[dict[str, Any], str, dict[str, Any]]] = {
    "fedavg": ({}, "fedavg", {}),
    "scaffold-partial-dropout": ({"participation": 0.75, "system": {"dropout": 0.3}}, "scaffold", {}),
    "moon-step-budgets": ({"system": {"local_steps": [1, 3]}}, "moon", {}),
    "fedbuff": ({"participation": 0.75, "system": {"speed_sigma": 1.0}}, "fedbuff", {"buffer_size": 2}),
    "fedbuff-dropout-buffer-1": (
        {"participation": 0.5, "system": {"speed_sigma": 1.0, "dropout": 0.3, "local_steps": [1, 3]}},
        "fedbuff",
        {"buffer_size": 1},
    ),
    "feduv": ({}, "feduv", {}),
    "fedld-decomposition": (
        {"rounds": 3, "diagnostics": {"every": 1, "decomposition": True}},
        "fedld",
        {"fidelity": "official", "fraction": 0.5},
    ),
    "fedbn-personalised": ({"participation": 0.5}, "fedbn", {}),
    "deadline": (
        {"system": {"dropout": 0.3, "local_steps": [1, 4], "speed_sigma": 0.8, "deadline": 3.0}},
        "fedavg",
        {},
    ),
    "diverges": ({"rounds": 3}, "fedprox", {"mu": 1e6}),
}
SKIPPED_ENGINE_CASES = {
    "faults-synchronous": "needs tests/engine/test_schedules.py's fault-injecting pool factory",
    "faults-fedbuff": "needs tests/engine/test_schedules.py's fault-injecting pool factory",
}

# each engine case reaches the branch it is there for (test_schedules.EXERCISED), checked on the before side: a
# case that no longer does is reported (a warning: the sides may still agree)
EXERCISED: dict[str, Callable[[list[dict]], bool]] = {
    "scaffold-partial-dropout": lambda rows: sum(r["clients_dropped"] for r in rows) > 0,
    "fedbuff-dropout-buffer-1": lambda rows: any(e["status"] == "dropped" for r in rows for e in r["client_log"]),
    # test_schedules looks for decomposition_s, a timing left out here: the decomposition's own terms instead
    "fedld-decomposition": lambda rows: all("loss_shift" in r for r in rows),
    "fedbn-personalised": lambda rows: all("personal_val_acc" in r for r in rows),
    "deadline": lambda rows: sum(r["clients_late"] for r in rows) > 0,
    "diverges": lambda rows: rows[-1].get("diverged") == 1.0,
}

# the --with-tune study: tests/conftest.py's tiny_space, 2 rounds, 2 trials, seed 0, one trial at a time
TUNE_SPACE: dict[str, Any] = {
    "name": "frozen_tune",
    "base": {
        "dataset": "digits",
        "partition": {"kind": "dirichlet", "alpha": 0.5, "clients": 3, "min_size": 20, "seed": 0},
        "rounds": 2,
        "batch_size": 32,
        "seed": 0,
        "resources": {"actors": 2, "cpus_per_actor": 1},
    },
    "variants": {
        "full": {
            "method": "univarfl",
            "search": {"mu": {"loguniform": [0.01, 1.0]}, "lambda": {"uniform": [0.5, 3.0]}},
        },
        "fedavg": {"method": "fedavg"},
    },
    "tune": {"num_samples": 2, "max_concurrent": 1, "scheduler": {"asha": {"grace_period": 1}}, "seed": 0},
}
# MLflow tags that differ between any two runs (ids, where and by whom a run was made): not compared
RANDOM_TAGS = {"mlflow.parentRunId", "trial_id", "model_id", "model_run_id", "study_run_id", "study_run_ids"}
RANDOM_TAG_PREFIXES = ("mlflow.source.", "mlflow.user", "mlflow.log-model", "mlflow.git")
_TIME_WORDS = {"time", "times", "duration", "seconds", "secs", "elapsed", "wall", "latency", "throughput"}
_MEMORY_WORDS = {"memory", "mem", "rss", "bytes", "mb", "gb", "mib", "gib"}


# ================================================================================== the comparison (pure)

MISSING = "<missing>"  # a row or key the after side lacks
ABSENT = "<absent>"  # a row or key only the after side has


@dataclasses.dataclass(frozen=True)
class Mismatch:
    """The first difference of a case: in round `round` (a round number, or a label such as "meta"), at `key`
    (a metric name; nested values as key[3].field), the two sides' values."""

    round: Any
    key: str
    before: Any
    after: Any

    def describe(self, width: int = 160) -> str:
        def shown(value: Any) -> str:
            text = value if value in (MISSING, ABSENT) else repr(value)
            return text if len(text) <= width // 2 else text[: width // 2 - 3] + "..."

        where = f"round {self.round}" if isinstance(self.round, int) else str(self.round)
        return f"{where} {self.key}: before {shown(self.before)} != after {shown(self.after)}"


def _float_bits(x: float) -> bytes:
    return struct.pack("<d", x)


def first_difference(
    before: Any, after: Any, path: str = "", allow_added: frozenset[str] = frozenset()
) -> tuple[str, Any, Any] | None:
    """None if the values are equal -- exactly: the same JSON types (bool is not int, int is not float), floats bit
    for bit (so NaN equals NaN, 0.0 differs from -0.0), dicts with the same keys (keys named in `allow_added` may
    appear on the after side only, at any depth), lists of the same length. Else (path, before, after) of the
    first difference."""
    if isinstance(before, float) and isinstance(after, float):
        return None if _float_bits(before) == _float_bits(after) else (path, before, after)
    if type(before) is not type(after):
        return (path, before, after)
    if isinstance(before, dict):
        for key in before:
            if key not in after:
                return (_join(path, key), before[key], MISSING)
        for key in after:
            if key not in before and key not in allow_added:
                return (_join(path, key), ABSENT, after[key])
        for key in before:
            found = first_difference(before[key], after[key], _join(path, key), allow_added)
            if found:
                return found
        return None
    if isinstance(before, list):
        for i, (b, a) in enumerate(zip(before, after)):
            found = first_difference(b, a, f"{path}[{i}]", allow_added)
            if found:
                return found
        if len(before) != len(after):
            i = min(len(before), len(after))
            return (f"{path}[{i}]", before[i] if i < len(before) else ABSENT, after[i] if i < len(after) else MISSING)
        return None
    return None if before == after else (path, before, after)


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _round_of(row: Mapping[str, Any], index: int) -> Any:
    value = row.get("round") if isinstance(row, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else index + 1


def compare_rows(
    before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]], allow_added: Iterable[str] = ()
) -> Mismatch | None:
    """The first difference between two runs' per-round rows (None if none): a row one side lacks, a key one side
    lacks (keys in `allow_added` may be added by the after side), or a value that differs (see first_difference)."""
    allowed = frozenset(allow_added)
    for i in range(max(len(before), len(after))):
        if i >= len(after):
            return Mismatch(_round_of(before[i], i), "(row)", f"round present ({len(before)} rows)", MISSING)
        if i >= len(before):
            return Mismatch(_round_of(after[i], i), "(row)", ABSENT, f"round present ({len(after)} rows)")
        found = first_difference(dict(before[i]), dict(after[i]), "", allowed)
        if found:
            return Mismatch(_round_of(before[i], i), *found)
    return None


@dataclasses.dataclass
class Outcome:
    """One case compared. rows/model/state/meta: True (equal), False (differ) or None (not compared)."""

    case: str
    rounds: tuple[int | None, int | None]
    rows: bool | None = None
    model: bool | None = None
    state: bool | None = None
    meta: bool | None = None
    detail: str = ""
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.detail and all(v is not False for v in (self.rows, self.model, self.state, self.meta))


def compare_case(
    case: str, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None, allow_added: Iterable[str] = ()
) -> Outcome:
    """A case's records from the two sides ({"rows", "digests", "meta"?, "error"}, as the runner writes them)
    compared: rows exactly, the final-state digests for equality, "meta" (a tune run's params and tags) exactly."""
    allowed = frozenset(allow_added)
    n_before = len(before["rows"]) if before and not before.get("error") else None
    n_after = len(after["rows"]) if after and not after.get("error") else None
    outcome = Outcome(case, (n_before, n_after))
    for side, record in (("before", before), ("after", after)):
        if record is None:
            outcome.detail = f"no record on the {side} side"
            return outcome
        if record.get("error"):
            outcome.detail = f"{side} side failed: {record['error'].splitlines()[0]}"
            return outcome
    mismatch = compare_rows(before["rows"], after["rows"], allowed)
    outcome.rows = mismatch is None
    details = [mismatch.describe()] if mismatch else []
    digests_b, digests_a = before.get("digests") or {}, after.get("digests") or {}
    for name in ("model", "state"):
        if name in digests_b or name in digests_a:
            equal = digests_b.get(name) == digests_a.get(name)
            setattr(outcome, name, equal)
            if not equal:
                details.append(
                    f"final {name} digest {str(digests_b.get(name))[:12]} != {str(digests_a.get(name))[:12]}"
                )
    if "meta" in before or "meta" in after:
        found = first_difference(before.get("meta"), after.get("meta"), "", allowed)
        outcome.meta = found is None
        if found:
            details.append(Mismatch("meta", *found).describe())
    outcome.detail = "; ".join(details)
    if outcome.ok and any(list(rb) != [k for k in ra if k in rb] for rb, ra in zip(before["rows"], after["rows"])):
        outcome.notes.append("key order differs (values equal)")
    return outcome


PARENT_SUFFIX = "(parent)"


def check_parent_params(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> list[Outcome]:
    """Per tune parent (`--parent-params-from-trials`): its after-side params are each of its trials' params minus
    the searched names (`search.<name>` gives them) and agree with the before side's on every name both log; the
    parents' params are then left out of the exact comparison (removed from both records, in place)."""
    outcomes = []
    for name in [n for n in after if n.endswith(PARENT_SUFFIX)]:
        variant = name.removeprefix(f"{TUNE_CASE}:").removesuffix(PARENT_SUFFIX)
        params_a = after[name].get("meta", {}).pop("params", {})
        params_b = before.get(name, {}).get("meta", {}).pop("params", {})
        searched = {k.removeprefix("search.") for k in params_a if k.startswith("search.")}
        unsearched = {k: v for k, v in params_a.items() if not k.startswith("search.")}
        outcome = Outcome(f"{name} params", (0, 0), rows=True, meta=True)
        trials = [n for n in after if re.fullmatch(rf"{re.escape(TUNE_CASE)}:{re.escape(variant)}-\d+", n)]
        for trial in trials:
            expected = {k: v for k, v in after[trial]["meta"]["params"].items() if k not in searched}
            if unsearched != expected:
                found = first_difference(expected, unsearched)
                outcome.meta, outcome.detail = False, f"{trial}'s params minus searched: {found}"
        changed = sorted(k for k in params_b.keys() & params_a.keys() if params_b[k] != params_a[k])
        if changed:
            outcome.meta, outcome.detail = False, f"before and after differ on {', '.join(changed)}"
        if not trials:
            outcome.meta, outcome.detail = False, "no trial run to compare with"
        outcomes.append(outcome)
    return outcomes


def format_table(outcomes: Sequence[Outcome]) -> str:
    def mark(value: bool | None) -> str:
        return "-" if value is None else ("yes" if value else "NO")

    def rounds(pair: tuple[int | None, int | None]) -> str:
        b, a = ("?" if n is None else str(n) for n in pair)
        return b if b == a else f"{b}/{a}"

    header = ("case", "rounds", "rows equal", "model equal", "state equal", "params/tags", "result")
    lines = [
        (o.case, rounds(o.rounds), mark(o.rows), mark(o.model), mark(o.state), mark(o.meta), "ok" if o.ok else "FAIL")
        for o in outcomes
    ]
    widths = [max(len(str(row[i])) for row in [header, *lines]) for i in range(len(header))]
    out = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in [header, *lines]]
    out.insert(1, "  ".join("-" * w for w in widths))
    for o in outcomes:
        if o.detail:
            out.append(f"  {o.case}: {o.detail}")
        for note in o.notes:
            out.append(f"  {o.case}: note: {note}")
    return "\n".join(out)


# ======================================================================================= the cases


def engine_specs() -> list[dict[str, Any]]:
    return [
        {"name": name, "experiment": experiment, "method": method, "params": params}
        for name, (experiment, method, params) in ENGINE_CASES.items()
    ]


def method_specs(methods: Sequence[str]) -> list[dict[str, Any]]:
    return [
        {"name": f"method:{m}", "experiment": {"rounds": METHOD_ROUNDS}, "method": m, "params": {}} for m in methods
    ]


def setup_error(message: str) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def select(names: Sequence[str], patterns: str | None) -> list[str]:
    """`names` filtered by comma-separated names or fnmatch patterns, in `names`' order; an unmatched one is an
    error (SystemExit 2)."""
    if not patterns:
        return list(names)
    wanted = [p.strip() for p in patterns.split(",") if p.strip()]
    unmatched = [p for p in wanted if not fnmatch.filter(names, p)]
    if unmatched:
        setup_error(f"--cases: no case matches {', '.join(unmatched)}; see --list")
    return [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in wanted)]


# ======================================================================================= the two sides


def materialise(repo: Path, rev: str, dest: Path) -> Path:
    """A frozen copy of `repo` at `rev`: git archive | tar -x into dest."""
    dest.mkdir(parents=True)
    archive = subprocess.Popen(["git", "-C", str(repo), "archive", rev], stdout=subprocess.PIPE)
    untar = subprocess.run(["tar", "-x", "-C", str(dest)], stdin=archive.stdout)
    archive.stdout.close()
    if archive.wait() != 0 or untar.returncode != 0:
        setup_error(f"could not materialise {rev} of {repo} (git archive {rev} | tar -x)")
    return dest


def tree_env(tree: Path) -> dict[str, str]:
    """The environment a side's processes run in: its tree first on PYTHONPATH, one thread per math library, no
    bytecode written into the tree, no Ray cluster or MLflow store inherited from this shell."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_ADDRESS", "MLFLOW_TRACKING_URI"))}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tree), os.environ.get("PYTHONPATH", "")) if p)
    env.update(PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return env


class Side:
    """One tree: its label, its path, and a scratch folder (with its own copy of the runner)."""

    def __init__(self, label: str, tree: Path, scratch: Path) -> None:
        self.label, self.tree, self.scratch = label, tree.resolve(), scratch
        scratch.mkdir(parents=True, exist_ok=True)
        runner_dir = scratch / "runner"
        runner_dir.mkdir(exist_ok=True)
        self.runner = Path(shutil.copy2(RUNNER, runner_dir / RUNNER.name))  # not the tree's (it may have none)

    def runner_cmd(self, *args: str) -> list[str]:
        return [sys.executable, str(self.runner), *args, "--tree", str(self.tree)]

    def methods(self) -> list[str] | str:
        """The tree's registered methods, or why they could not be listed."""
        done = subprocess.run(
            self.runner_cmd("methods"),
            env=tree_env(self.tree),
            cwd=self.scratch,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            return (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        return json.loads(done.stdout.strip().splitlines()[-1])


_print_lock = threading.Lock()


def say(text: str) -> None:
    with _print_lock:
        print(text, flush=True)


def run_sides(sides: Sequence[Side], specs: list[dict[str, Any]], out: Path, parallel: bool) -> dict[str, Any]:
    """Runs `specs` on each side (one subprocess per side; both at once if `parallel`); their JSON results by
    label, or {"error": ...} for a side that failed as a whole."""
    results: dict[str, Any] = {}

    def one(side: Side) -> None:
        cases_file = side.scratch / "cases.json"
        cases_file.write_text(json.dumps(specs, indent=1))
        result_file = out / f"{side.label}.json"
        stderr_file = side.scratch / "runner.stderr.txt"
        started = time.perf_counter()
        with stderr_file.open("w") as stderr:
            process = subprocess.Popen(
                side.runner_cmd("run", "--cases", str(cases_file), "--out", str(result_file)),
                env=tree_env(side.tree),
                cwd=side.scratch,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
            for line in process.stdout:
                say(f"[{side.label}] {line.rstrip()}")
            code = process.wait()
        wall = time.perf_counter() - started
        say(f"[{side.label}] runner exit {code} after {wall:.1f} s")
        if code != 0 or not result_file.exists():
            tail = stderr_file.read_text().strip().splitlines()[-8:]
            why = "raytune_fl did not come from the tree" if code == 3 else f"runner exit {code}"
            results[side.label] = {"error": why + "\n" + "\n".join(tail), "wall_s": wall}
            say(f"[{side.label}] FAILED: {why}; stderr tail:\n    " + "\n    ".join(tail))
        else:
            results[side.label] = json.loads(result_file.read_text()) | {"wall_s": wall}

    if parallel:
        threads = [threading.Thread(target=one, args=(side,)) for side in sides]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        for side in sides:
            one(side)
    return results


# ---------------------------------------------------------------------------------------- the tune case


def is_untimed_metric(name: str) -> bool:
    """False for a timing or memory metric: a name ending in `_s`, or with a word such as time, duration, wall,
    memory, mb in it (so also sim_time, the simulated clock)."""
    words = set(re.split(r"[^a-z0-9]+", name.lower()))
    return not (name.endswith("_s") or words & (_TIME_WORDS | _MEMORY_WORDS))


def run_tune(side: Side, timeout_s: int = TUNE_TIMEOUT_S) -> dict[str, Any]:
    """The real `python scripts/tune.py` of `side`'s tree on TUNE_SPACE, into a fresh SQLite MLflow store; its
    records read back ({"records", "uri", "wall_s"} or {"error"})."""
    import yaml

    work = side.scratch / "tune"
    work.mkdir()
    space = work / f"{TUNE_SPACE['name']}.yaml"
    space.write_text(yaml.safe_dump(TUNE_SPACE, sort_keys=False))
    uri = f"sqlite:///{work / 'mlflow.db'}"
    ray_tmp = tempfile.mkdtemp(prefix="rfc", dir="/tmp")  # short: Ray's socket paths have a length limit
    env = tree_env(side.tree) | {"RAY_TMPDIR": ray_tmp}
    # the command's imports resolve in its tree: the same check as the runner's, in the same environment and cwd
    probe = subprocess.run(
        [sys.executable, "-c", "import raytune_fl; print(raytune_fl.__file__)"],
        env=env,
        cwd=work,
        capture_output=True,
        text=True,
    )
    found = Path(probe.stdout.strip() or "/nonexistent").resolve()
    if probe.returncode != 0 or side.tree not in found.parents:
        shutil.rmtree(ray_tmp, ignore_errors=True)
        return {"error": f"raytune_fl resolves to {found}, not inside {side.tree}: {probe.stderr.strip()[-300:]}"}
    command = [
        sys.executable,
        str(side.tree / "scripts" / "tune.py"),
        "--space",
        str(space),
        "--mlflow-uri",
        uri,
        "--storage",
        str(work / "ray_results"),
        "--optuna-storage",
        f"sqlite:///{work / 'optuna.db'}",
        "--num-samples",
        "2",
        "--seed",
        "0",
    ]
    say(f"[{side.label}] tune: {' '.join(command[1:2])} --space {space.name} ... (cwd {work})")
    started = time.perf_counter()
    log = work / "tune.log"
    with log.open("w") as out:
        # its own process group: a timeout ends the driver and the Ray cluster it started together
        process = subprocess.Popen(
            command, env=env, cwd=work, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            code = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            code = "timeout"
    wall = time.perf_counter() - started
    shutil.rmtree(ray_tmp, ignore_errors=True)
    say(f"[{side.label}] tune: exit {code} after {wall:.1f} s (log {log})")
    if code != 0:
        return {
            "error": f"scripts/tune.py exit {code}:\n{error_excerpt(log.read_text(errors='replace'))}",
            "wall_s": wall,
        }
    records = read_mlflow(uri, TUNE_SPACE["name"], {str(work): "<WORK>", str(side.tree): "<TREE>", ray_tmp: "<RAY>"})
    return {"records": records, "uri": uri, "wall_s": wall}


def error_excerpt(text: str, lines: int = 8) -> str:
    """The lines of a log that name an error (a Ray actor's crash ends in a C stack, not in its Python error)."""
    found = [line for line in text.splitlines() if _ERROR_LINE.search(line)]
    return "\n".join(found[-lines:] or text.strip().splitlines()[-lines:])


_ERROR_LINE = re.compile(r"Traceback|Error\b|Exception\b|^error:|Error:")


def read_mlflow(uri: str, experiment_name: str, replacements: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """Every run of the experiment as a case record: trial runs ("tune:<run name>") with per-step rows of their
    untimed metric histories and meta = params and tags; parent runs ("tune:<variant>(parent)") with meta = params,
    tags (best.* included) and final untimed metrics. Ids, and the run's folders (`replacements`), left out."""
    from mlflow.tracking import MlflowClient

    def clean(text: str) -> str:
        for old, new in replacements.items():
            text = text.replace(old, new)
        return text

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(experiment_name)
    if experiment is None:
        raise RuntimeError(f"no MLflow experiment {experiment_name!r} at {uri}")
    records: dict[str, dict[str, Any]] = {}
    for run in client.search_runs([experiment.experiment_id], max_results=10_000):
        tags = {
            k: clean(v)
            for k, v in sorted(run.data.tags.items())
            if k not in RANDOM_TAGS and not k.startswith(RANDOM_TAG_PREFIXES)
        }
        meta: dict[str, Any] = {
            "status": run.info.status,
            "params": {k: clean(v) for k, v in sorted(run.data.params.items())},
            "tags": tags,
        }
        names = sorted(n for n in run.data.metrics if is_untimed_metric(n))
        if "mlflow.parentRunId" in run.data.tags:
            by_step: dict[int, dict[str, Any]] = {}
            for name in names:
                history = sorted(client.get_metric_history(run.info.run_id, name), key=lambda m: m.step)
                for m in history:
                    row = by_step.setdefault(int(m.step), {"round": int(m.step)})
                    if name not in row:
                        row[name] = m.value
                    else:  # a step logged twice (a replayed round): every value, in order
                        row[name] = [*(row[name] if isinstance(row[name], list) else [row[name]]), m.value]
            records[f"{TUNE_CASE}:{run.info.run_name}"] = {
                "rows": [by_step[s] for s in sorted(by_step)],
                "meta": meta,
                "error": None,
            }
        else:
            meta["metrics"] = {n: run.data.metrics[n] for n in names}
            records[f"{TUNE_CASE}:{run.info.run_name}(parent)"] = {"rows": [], "meta": meta, "error": None}
    return dict(sorted(records.items()))


# ============================================================================================== main


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="frozen_compare.py",
        description=__doc__.split("\n\n")[0] + "\n\n" + "\n\n".join(__doc__.split("\n\n")[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--repo", type=Path, default=REPO, help="the git repository (default: %(default)s)")
    parser.add_argument("--base", default=DEFAULT_BASE, help="the before side's revision (default: %(default)s)")
    after = parser.add_mutually_exclusive_group()
    after.add_argument("--after", type=Path, help="the after side's source tree (default: the repository root)")
    after.add_argument("--after-rev", metavar="REV", help="the after side: a frozen copy of this revision instead")
    parser.add_argument("--cases", metavar="NAME,...", help="only these cases (names or fnmatch patterns, --list)")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    parser.add_argument("--with-tune", action="store_true", help="also run the end-to-end `tune` case (~1 min a side)")
    parser.add_argument(
        "--allow-added-keys",
        metavar="K1,K2",
        default="",
        help="metric (or param/tag) keys the after side may add; any other added key is a mismatch",
    )
    parser.add_argument(
        "--parent-params-from-trials",
        action="store_true",
        help="tune parents: instead of equal params, the after side's must be its trials' params minus the searched "
        "names (plus search.<name>), and agree with the before side's on every name both log (issue 49's fix)",
    )
    parser.add_argument("--serial", action="store_true", help="run the two sides one after the other, not at once")
    parser.add_argument("--out", type=Path, help="where the JSON results go (default: a new folder under /tmp)")
    parser.add_argument("--keep", action="store_true", help="keep the frozen trees and the tune stores")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    started = time.perf_counter()
    repo = args.repo.resolve()
    scratch = Path(tempfile.mkdtemp(prefix="frozen_compare-"))
    try:
        return _main(args, repo, scratch, started)
    finally:
        if args.keep:
            print(f"kept: {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)


def _main(args: argparse.Namespace, repo: Path, scratch: Path, started: float) -> int:
    before_tree = materialise(repo, args.base, scratch / "before_tree")
    before = Side("before", before_tree, scratch / "before")
    methods_before = before.methods()
    if isinstance(methods_before, str):
        print(f"error: the before tree ({args.base}) cannot list its methods: {methods_before}", file=sys.stderr)
        return 2
    all_names = [*ENGINE_CASES, *(f"method:{m}" for m in methods_before), TUNE_CASE]
    if args.list:
        for name in ENGINE_CASES:
            experiment, method, params = ENGINE_CASES[name]
            print(f"{name:28} engine  " + " ".join(str(x) for x in (method, params, experiment) if x))
        for name in SKIPPED_ENGINE_CASES:
            print(f"{'(' + name + ')':28} skipped: {SKIPPED_ENGINE_CASES[name]}")
        for m in methods_before:
            print(f"{'method:' + m:28} method  {m} with its defaults, {METHOD_ROUNDS} rounds")
        print(f"{TUNE_CASE:28} tune    scripts/tune.py end to end (with --with-tune, or named in --cases)")
        return 0
    chosen = select(all_names, args.cases)
    with_tune = args.with_tune or (TUNE_CASE in chosen and args.cases is not None)
    chosen = [n for n in chosen if n != TUNE_CASE]
    allow_added = {k.strip() for k in args.allow_added_keys.split(",") if k.strip()}

    if args.after_rev:
        after_tree, after_label = materialise(repo, args.after_rev, scratch / "after_tree"), f"{args.after_rev}"
    else:
        after_tree = (args.after or repo).resolve()
        after_label = "working tree" if after_tree == repo else str(after_tree)
    after = Side("after", after_tree, scratch / "after")
    out = args.out or Path(tempfile.mkdtemp(prefix="frozen_compare_results-"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"before: {args.base} (frozen copy in {before.tree})")
    print(f"after:  {after_label} ({after.tree})")
    print(f"results: {out}")

    # the methods: listed from the before tree (none can drop out unseen); either side's missing ones reported
    failures: list[str] = []
    methods_after = after.methods()
    if isinstance(methods_after, str):
        failures.append(f"the after tree cannot list its methods: {methods_after}")
        print(f"after: cannot list the methods: {methods_after}")
    else:
        missing = [m for m in methods_before if m not in methods_after]
        added = [m for m in methods_after if m not in methods_before]
        print(f"methods: {len(methods_before)} before, {len(methods_after)} after", end="")
        print(
            f"; missing after: {', '.join(missing) or 'none'}; added after (not compared): {', '.join(added) or 'none'}"
        )
        if missing:
            failures.append(f"methods missing on the after side: {', '.join(missing)}")

    specs = [s for s in [*engine_specs(), *method_specs(methods_before)] if s["name"] in chosen]
    outcomes: list[Outcome] = []
    sides_wall: dict[str, float] = {}
    if specs:
        print(
            f"running {len(specs)} cases on each side ({'one side after the other' if args.serial else 'both at once'})"
        )
        results = run_sides([before, after], specs, out, parallel=not args.serial)
        for label, result in results.items():
            sides_wall[label] = result.get("wall_s", 0.0)
        for spec in specs:
            name = spec["name"]
            records = {}
            for label in ("before", "after"):
                result = results[label]
                records[label] = (
                    {"rows": [], "error": result["error"]} if "error" in result else result["cases"].get(name)
                )
            outcome = compare_case(name, records["before"], records["after"], allow_added)
            check = EXERCISED.get(name)
            if check and records["before"] and not records["before"].get("error"):
                try:
                    reached = check(records["before"]["rows"])
                except (KeyError, IndexError, TypeError):
                    reached = False
                if not reached:
                    outcome.notes.append("the before side no longer reaches the branch this case is there for")
            outcomes.append(outcome)

    if with_tune:
        tune_results = {}
        for side in (before, after):
            try:
                tune_results[side.label] = run_tune(side)
            except Exception as error:  # reading the store, say: the comparison goes on
                tune_results[side.label] = {"error": f"{type(error).__name__}: {error}"}
            (out / f"tune_{side.label}.json").write_text(json.dumps(tune_results[side.label], indent=1))
            sides_wall[f"tune {side.label}"] = tune_results[side.label].get("wall_s", 0.0)
        errors = {label: r["error"] for label, r in tune_results.items() if "error" in r}
        if errors:
            for label, error in errors.items():
                outcomes.append(Outcome(f"{TUNE_CASE} ({label})", (None, None), detail=f"{label} side: {error}"))
        else:
            rb, ra = tune_results["before"]["records"], tune_results["after"]["records"]
            if args.parent_params_from_trials:
                outcomes.extend(check_parent_params(rb, ra))
            for name in [*rb, *(n for n in ra if n not in rb)]:
                outcomes.append(compare_case(name, rb.get(name), ra.get(name), allow_added))

    print()
    print(format_table(outcomes))
    for failure in failures:
        print(f"FAIL: {failure}")
    (out / "comparison.json").write_text(
        json.dumps(
            {"outcomes": [dataclasses.asdict(o) | {"ok": o.ok} for o in outcomes], "failures": failures}, indent=1
        )
    )
    ok = all(o.ok for o in outcomes) and not failures
    walls = ", ".join(f"{k} {v:.1f} s" for k, v in sides_wall.items())
    print(
        f"\n{sum(o.ok for o in outcomes)}/{len(outcomes)} cases equal; "
        f"{'ALL EQUAL' if ok else 'DIFFERENCES FOUND'}; wall {time.perf_counter() - started:.1f} s ({walls})"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
