"""The round driver split into schedules, data and evaluation modules behaves exactly as before.

A frozen copy of the driver as it was (tests/support/frozen_engine) runs next to the engine on the same configs:
their per-round metrics (timings left out) and final states must be equal with `==`, and so must a run
resumed from a checkpoint. Also: no module of raytune_fl/engine imports another in a cycle.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from raytune_fl.engine.checkpoint import load_state, save_state
from raytune_fl.engine.federation import CLIENT_LOG_KEY, WORST_CLIENT_SPREAD, Federation
from raytune_fl.engine.pool import ClientLost, InProcessPool, Outcome, TrainJob, WorkerFailure
from raytune_fl.engine.worker import ClientWorker, WorkerSpec
from raytune_fl.metrics import COLLAPSED, DIVERGED, TEST_CHANCE, UPLOAD_BYTES, UPLOAD_BYTES_PER_CLIENT, VAL_CHANCE
from tests.support import REPO
from tests.support.frozen_engine import federation as frozen
from tests.support.resume_check import resumable_experiment as _experiment  # the same tiny 4-client digits run

ENGINE = REPO / "raytune_fl" / "engine"


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # the comparisons are bit for bit: one thread keeps float sums in one order (and shares the 2 cores)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _untimed(rows: Sequence[dict]) -> list[dict]:
    added = ADDED_TRAFFIC | ADDED_CHANCE
    return [{k: v for k, v in row.items() if not k.endswith("_s") and k not in added} for row in rows]


def _same(a: Any, b: Any) -> bool:
    """Deep equality for states holding numpy arrays (dtype and values) and records."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        return type(a) is type(b) and _same(dataclasses.asdict(a), dataclasses.asdict(b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


class _FlakyPool:
    """In process, with faults: chosen (round, client) jobs come back lost, and every job of `failing_client`
    records a worker failure when it is submitted (so a failure of round r + 1 is drained while r is reported)."""

    def __init__(self, spec: WorkerSpec, data: Any, lose: set[tuple[int, int]], failing_client: int) -> None:
        worker = ClientWorker(spec, data.dataset.x_train, data.dataset.y_train, data.train_parts)
        self.inner = InProcessPool(worker)
        self.lose, self.failing_client = lose, failing_client
        self.lost: set[int] = set()
        self.failures: list[WorkerFailure] = []

    def ready(self) -> None:
        self.inner.ready()

    def submit(self, job: TrainJob) -> int:
        ticket = self.inner.submit(job)
        if (job.round_index, job.client_id) in self.lose:
            self.lost.add(ticket)
        if job.client_id == self.failing_client:
            self.failures.append(WorkerFailure(job.round_index, job.client_id, 0, "injected"))
        return ticket

    def submit_all(self, jobs: Sequence[TrainJob], summed: bool = False) -> list[int]:
        return [self.submit(job) for job in jobs]  # a delta per client whatever `summed` says: it loses clients

    def collect(self, tickets: Sequence[int]) -> dict[int, Outcome]:
        lost = [t for t in tickets if t in self.lost]
        outcomes: dict[int, Outcome] = {}
        for ticket in lost:
            job = self.inner.jobs.pop(ticket)
            outcomes[ticket] = ClientLost(job.client_id, 2, "injected")
        outcomes.update(self.inner.collect([t for t in tickets if t not in self.lost]))
        return {t: outcomes[t] for t in tickets}

    def drain_failures(self) -> list[WorkerFailure]:
        drained, self.failures = self.failures, []
        return drained

    def close(self) -> None:
        self.inner.close()


def _flaky(data: Any, spec: WorkerSpec) -> _FlakyPool:
    return _FlakyPool(spec, data, lose={(2, 1), (3, 0), (3, 2)}, failing_client=3)


CASES = {
    "fedavg": (_experiment(), "fedavg", {}, {}),
    "scaffold-partial-dropout": (
        _experiment(participation=0.75, system={"dropout": 0.3}),
        "scaffold",
        {},
        {},
    ),
    "moon-step-budgets": (_experiment(system={"local_steps": [1, 3]}), "moon", {}, {}),
    "fedbuff": (
        _experiment(participation=0.75, system={"speed_sigma": 1.0}),
        "fedbuff",
        {"buffer_size": 2},
        {},
    ),
    "fedbuff-dropout-buffer-1": (
        _experiment(participation=0.5, system={"speed_sigma": 1.0, "dropout": 0.3, "local_steps": [1, 3]}),
        "fedbuff",
        {"buffer_size": 1},
        {},
    ),
    "feduv": (_experiment(), "feduv", {}, {}),
    "fedld-decomposition": (
        _experiment(rounds=3, diagnostics={"every": 1, "decomposition": True}),
        "fedld",
        {"fidelity": "official", "fraction": 0.5},
        {},
    ),
    "fedbn-personalised": (_experiment(participation=0.5), "fedbn", {}, {}),
    "deadline": (
        _experiment(system={"dropout": 0.3, "local_steps": [1, 4], "speed_sigma": 0.8, "deadline": 3.0}),
        "fedavg",
        {},
        {},
    ),
    "diverges": (_experiment(rounds=3), "fedprox", {"mu": 1e6}, {}),
    "faults-synchronous": (_experiment(), "scaffold", {}, {"pool_factory": _flaky}),
    "faults-fedbuff": (
        _experiment(participation=0.5, system={"speed_sigma": 1.0}),
        "fedbuff",
        {"buffer_size": 2},
        {"pool_factory": _flaky},
    ),
}


# each case reaches the branch it is there for
EXERCISED = {
    "scaffold-partial-dropout": lambda rows: sum(r["clients_dropped"] for r in rows) > 0,
    "fedbuff-dropout-buffer-1": lambda rows: any(e["status"] == "dropped" for r in rows for e in r[CLIENT_LOG_KEY]),
    "fedld-decomposition": lambda rows: all(any(k.startswith("decomposition") for k in r) for r in rows),
    "fedbn-personalised": lambda rows: all("personal_val_acc" in r for r in rows),
    "deadline": lambda rows: sum(r["clients_late"] for r in rows) > 0,
    "diverges": lambda rows: rows[-1].get("diverged") == 1.0,
    "faults-synchronous": lambda rows: sum(r["clients_lost"] for r in rows) > 0 and rows[0]["actor_failures"] > 0,
    "faults-fedbuff": lambda rows: (
        any(e["status"] == "lost" for r in rows for e in r[CLIENT_LOG_KEY]) and rows[-1]["actor_failures_total"] > 0
    ),
}


def _run(federation: Any) -> list[dict]:
    rows: list[dict] = []
    federation.run(rows.append)
    return rows


ADDED_TIMINGS = {"evaluate_s"}  # round metrics the engine reports beyond the frozen driver's (timings only)
# the upload counts (engine/traffic.py) came after the driver was frozen: these comparisons leave them out (and only
# them); tests/engine/test_traffic.py checks their values by hand
ADDED_TRAFFIC = {UPLOAD_BYTES, UPLOAD_BYTES_PER_CLIENT}
# so did the chance bounds and the collapse flag of an evaluated round (tests/engine/test_chance.py checks them)
ADDED_CHANCE = {VAL_CHANCE, TEST_CHANCE, COLLAPSED}


def _as_frozen(rows: Sequence[dict], frozen_rows: Sequence[dict]) -> list[dict]:
    """Every method's personal_val_acc came after the driver was frozen (a global model's is its val_acc): left out of
    a row whose frozen twin lacks it, once checked to be that val_acc (a diverged report's: 0)."""
    out = []
    for row, before in zip(rows, frozen_rows):
        if "personal_val_acc" in row and "personal_val_acc" not in before:
            assert row["personal_val_acc"] == (0.0 if row.get(DIVERGED) else row["val_acc"])
            row = {k: v for k, v in row.items() if k != "personal_val_acc"}
        out.append(row)
    return out


def _without_worst_spread(rows: Sequence[dict]) -> list[dict]:
    """A diverged report's client spread at its worst came after the driver was frozen (several objectives need each
    one in every result; tests/tune/test_divergence.py checks the values): left out of the comparison there only."""
    return [{k: v for k, v in row.items() if not (row.get(DIVERGED) and k in WORST_CLIENT_SPREAD)} for row in rows]


@pytest.mark.parametrize("case", list(CASES))
def test_the_engine_matches_the_frozen_driver(case):
    experiment, method, params, kwargs = CASES[case]
    before = frozen.Federation(experiment, method, params, **kwargs)
    after = Federation(experiment, method, params, **kwargs)
    expected, got = _run(before), _without_worst_spread(_run(after))
    got = _as_frozen(got, expected)
    assert len(got) == len(expected) >= 1
    assert EXERCISED.get(case, lambda rows: True)(expected)
    assert _untimed(got) == _untimed(expected)
    # the same keys besides the timings added since the driver was frozen (a RoundReport files its lists after
    # its scalars: the order of keys is not part of a report)
    added = ADDED_TIMINGS | ADDED_TRAFFIC | ADDED_CHANCE
    assert [{k for k in row if k not in added} for row in got] == [set(row) for row in expected]
    assert all(ADDED_TIMINGS | {UPLOAD_BYTES} <= set(row) for row in got if "round_time_s" in row)
    assert _same(after.state_dict(), before.state_dict())


RESUMABLE = ["scaffold-partial-dropout", "moon-step-budgets", "fedbuff", "fedbuff-dropout-buffer-1", "faults-fedbuff"]


class _Crash(Exception):
    pass


def _state_after_round_2(make: Any, tmp_path: Path) -> dict:
    """Runs until round 2 is reported and returns the checkpoint taken with that report, through the disk."""
    tmp_path.mkdir()
    federation = make()

    def crash_after_round_2(metrics: dict) -> None:
        if metrics["round"] == 2:
            save_state(federation.state_dict(), tmp_path)  # what the trainable checkpoints with the report
            raise _Crash

    with pytest.raises(_Crash):
        federation.run(crash_after_round_2)
    return load_state(tmp_path)


@pytest.mark.parametrize("case", RESUMABLE)
def test_a_checkpoint_round_trip_continues_as_the_straight_run(case, tmp_path):
    experiment, method, params, kwargs = CASES[case]
    straight = _run(Federation(experiment, method, params, **kwargs))
    frozen_rows = _run(frozen.Federation(experiment, method, params, **kwargs))
    assert _untimed(_as_frozen(straight, frozen_rows)) == _untimed(frozen_rows)
    # the new engine's checkpoint, and one the frozen driver wrote (old checkpoints keep loading)
    states = {}
    for name, make in (("engine", Federation), ("frozen", frozen.Federation)):
        state = states[name] = _state_after_round_2(
            lambda make=make: make(experiment, method, params, **kwargs), tmp_path / name
        )
        assert state.keys() == {
            "round",
            "weights",
            "client_states",
            "aggregator",
            "sim_time",
            "failures_total",
            "asynchronous",
        }
        assert (state["asynchronous"] is None) == (method != "fedbuff")
        resumed, resumed_frozen = (
            Federation(experiment, method, params, **kwargs),
            frozen.Federation(experiment, method, params, **kwargs),
        )
        resumed.load_state_dict(state)
        resumed_frozen.load_state_dict(state)
        rest, rest_frozen = _run(resumed), _run(resumed_frozen)
        assert [r["round"] for r in rest] == [3, 4], name
        assert _untimed(_as_frozen(rest, rest_frozen)) == _untimed(rest_frozen), name
        assert _same(resumed.state_dict(), resumed_frozen.state_dict()), name
        assert _untimed(rest) == _untimed(straight[2:]), name
    assert _same(states["engine"], states["frozen"])


def _engine_imports() -> dict[str, set[str]]:
    """raytune_fl.engine's import graph, module -> engine modules it imports (anywhere: TYPE_CHECKING too)."""
    modules = {}
    for path in ENGINE.rglob("*.py"):
        parts = path.relative_to(REPO).with_suffix("").parts
        package = parts[:-1] if parts[-1] == "__init__" else parts
        modules[".".join(package)] = (path, parts[:-1])
    graph: dict[str, set[str]] = {}
    for name, (path, parent) in modules.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(parent[: len(parent) - node.level + 1]) if node.level else ""
                source = ".".join(p for p in (base, node.module or "") if p)
                targets = [source] + [f"{source}.{alias.name}" for alias in node.names]
            else:
                continue
            for target in targets:
                # `import a.b.c` runs a, a.b and a.b.c: each engine module on the way counts
                pieces = target.split(".")
                found |= {".".join(pieces[:i]) for i in range(1, len(pieces) + 1)} & modules.keys()
        graph[name] = found - {name}
    return graph


def test_the_engine_has_no_import_cycle():
    graph = _engine_imports()
    assert "raytune_fl.engine.federation" in graph
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            raise AssertionError("import cycle: " + " -> ".join(path[path.index(module) :] + [module]))
        if module in done:
            return
        for target in sorted(graph[module]):
            visit(target, path + [module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])


@pytest.mark.parametrize("method,params", [("fedavg", {}), ("fedbuff", {"buffer_size": 2})])
def test_a_federation_restored_from_its_last_round_runs_no_further(method, params):
    # Tune restores a trial killed after its last checkpoint but before it ended: it must not run round rounds + 1
    experiment = _experiment(rounds=2)
    finished = Federation(experiment, method, params)
    rows = _run(finished)
    assert [r["round"] for r in rows] == [1, 2]
    restored = Federation(experiment, method, params)
    restored.load_state_dict(finished.state_dict())
    assert _run(restored) == []
