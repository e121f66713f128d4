"""Run a command in a child process and measure it from outside: wall time and peak PSS of its process tree.

PSS (proportional set size) splits shared pages among the processes that map them, so a tree of Ray workers
that share torch's libraries and the object store is not counted several times over. Read from
/proc/<pid>/smaps_rollup (Linux), no psutil needed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MiB = 1024 * 1024


def children_map() -> dict[int, list[int]]:
    """parent pid -> child pids, for every process we can see."""
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # exited meanwhile
        ppid = int(stat.rsplit(")", 1)[1].split()[1])  # the name in parentheses may contain spaces
        tree.setdefault(ppid, []).append(int(entry))
    return tree


def descendants(root: int, tree: dict[int, list[int]] | None = None) -> list[int]:
    """`root` and every process below it."""
    tree = children_map() if tree is None else tree
    found, stack = [], [root]
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(tree.get(pid, []))
    return found


def pss_bytes(pid: int) -> int:
    """The process's PSS in bytes, 0 if it has exited or cannot be read."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def tree_pss(root: int) -> int:
    return sum(pss_bytes(pid) for pid in descendants(root))


@dataclass
class Measured:
    wall_s: float  # process start to exit
    peak_pss: int  # bytes, the largest sum over the tree at one sample
    returncode: int
    stdout: str
    stderr: str
    stamped: list[tuple[float, str]] = dataclasses.field(default_factory=list)  # (s since start, stdout line)

    def report(self, label: str) -> dict[str, Any]:
        """The child's own report (`last_json`); a child that failed raises, named by `label`, with its stderr."""
        if self.returncode != 0:
            raise RuntimeError(f"{label} exited with {self.returncode}:\n{self.stderr[-3000:]}")
        return self.last_json()

    def last_json(self) -> dict[str, Any]:
        """The last line of stdout that parses as a JSON object: the child's own report."""
        report = last_json(self.stdout)
        if report is None:
            tail = self.stderr[-3000:]
            raise RuntimeError(f"no JSON report on stdout (exit {self.returncode}); stderr tail:\n{tail}")
        return report


def last_json(stdout: str) -> dict[str, Any] | None:
    """The last line of `stdout` that parses as a JSON object (a child's own report), or None."""
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    return None


def measure(command: Sequence[str], interval_s: float = 1.0, env: dict[str, str] | None = None) -> Measured:
    """Run `command`, sampling its process tree's PSS every `interval_s` until it exits.

    A sample costs the kernel ~70 ms of CPU for a tree of torch processes (smaps_rollup walks their
    mappings): sampling every 0.1 s stole half a core from the run it measured. Memory plateaus within
    seconds, so one sample a second finds the peak."""
    started = time.perf_counter()
    child = subprocess.Popen(
        list(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=with_repo_on_path(env)
    )
    peak = 0
    outputs: dict[str, str] = {}

    stamped: list[tuple[float, str]] = []

    def drain(name: str, stream) -> None:  # read both pipes while sampling: a full pipe would block the child
        if name == "err":
            outputs[name] = stream.read()
            return
        lines = []
        for line in stream:  # when each stdout line arrived: a timeline of the child's progress
            stamped.append((time.perf_counter() - started, line.rstrip("\n")))
            lines.append(line)
        outputs[name] = "".join(lines)

    readers = [threading.Thread(target=drain, args=(n, s)) for n, s in (("out", child.stdout), ("err", child.stderr))]
    for reader in readers:
        reader.start()
    while True:
        peak = max(peak, tree_pss(child.pid))
        try:
            child.wait(timeout=interval_s)  # returns at the exit itself: the wall time stays exact
            break
        except subprocess.TimeoutExpired:
            pass
    wall = time.perf_counter() - started
    for reader in readers:
        reader.join()
    return Measured(wall, peak, child.returncode, outputs.get("out", ""), outputs.get("err", ""), stamped)


REPO = Path(__file__).resolve().parents[1]


def run_echoed(command: Sequence[str], label: str, shown: Callable[[str], bool], width: int = 200) -> float:
    """`command` to its end, each line `shown` keeps echoed as `  <label>: <line>` (cut to `width`); its last 60
    lines in the error when it fails. Returns its wall time."""
    started, tail = time.perf_counter(), deque[str](maxlen=60)  # what a failure shows
    environment = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with subprocess.Popen(
        list(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            tail.append(line)
            if shown(line):
                print(f"  {label}: {line.rstrip()[:width]}", flush=True)
    if process.returncode != 0:
        raise RuntimeError(f"{Path(command[1]).name} ({label}) exited with {process.returncode}:\n{''.join(tail)}")
    return time.perf_counter() - started


def with_repo_on_path(env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment with the repository first on PYTHONPATH: `python -m benchmarks.x` children run from any cwd."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def python_module(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


def print_result(title: str, table: str, rows: Any, json_path: str | None) -> None:
    """The end of every benchmark: its table under a title line, and the rows as JSON when asked."""
    print(f"\n{title}")
    print(table)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(rows, f, indent=1)
