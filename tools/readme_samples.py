"""The sample output in README.md and the tutorial, cut from a recorded run of the quick start: never copied by hand.

    python -m tools.readme_samples --record   run the quick start as a new user does, into tools/samples/quickstart.txt
    python -m tools.readme_samples --write    rewrite the sample blocks of README.md and docs/tutorial/first-study.md
    python -m tools.readme_samples --check    exit 1 when a block differs from what the transcript gives

The record is `raytune-fl tune --space search_spaces/quickstart.yaml` (the console entry point, on this clone's code)
in a fresh folder that holds a copy of the space at that path, so that the commands it prints read as in a clone's
root: stdout and stderr as one stream, unbuffered, in the order a terminal shows them (piped: no status line redrawn
in place), the folder's path written as $PWD. A block is a `text` fence between `<!-- sample: VIEW ... -->` and
`<!-- /sample -->`: the transcript's lines that VIEWS names. tests/tooling/test_readme_samples.py fails when a block
is stale; tests/system/test_quickstart.py, when a real run selects other hyperparameters than the transcript's
(record again after a change that moves the quick start's numbers).
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRANSCRIPT = REPO / "tools" / "samples" / "quickstart.txt"
PAGES = (REPO / "README.md", REPO / "docs" / "tutorial" / "first-study.md")
SPACE = "search_spaces/quickstart.yaml"  # as the README gives it
COMMAND = ["tune", "--space", SPACE]
CONSOLE = "from raytune_fl.cli.console import run; run()"  # what the installed `raytune-fl` script runs
HEADER = "# "  # the transcript's first line says how it was made; no view shows it
_BLOCK = re.compile(r"(<!-- sample: (\w+)[^\n]*-->\n)(.*?)(<!-- /sample -->)", re.S)
# a variant's line in the summary: its score (%), its standard error and its selected hyperparameters
_SUMMARY = re.compile(r"^ +(\S+): \w+ (\S+) % ± (\S+)  \w+ \S+ % \(round \d+\) \[(.*?)\] trials ", re.M)


def _between(lines: list[str], first: str, last: str | None) -> list[str]:
    """From the line that starts with `first` to the one that starts with `last` (None: to the end), both in."""
    start = next(i for i, line in enumerate(lines) if line.startswith(first))
    if last is None:
        return lines[start:]
    return lines[start : next(i for i in range(start, len(lines)) if lines[i].startswith(last)) + 1]


def run_view(lines: list[str]) -> list[str]:
    """What the run prints while it runs: every line before the summary."""
    return lines[: next(i for i, line in enumerate(lines) if line.startswith("=== best configuration"))]


def summary_view(lines: list[str]) -> list[str]:
    """The summary (each variant's selection and scores, the total time), then the "next" block."""
    return [
        *_between(lines, "=== best configuration", "total wall time"),
        "...",
        *_between(lines, "=== next ===", None),
    ]


VIEWS: dict[str, Callable[[list[str]], list[str]]] = {"run": run_view, "summary": summary_view}


def transcript_lines(text: str) -> list[str]:
    """The run's lines, without the header and the trailing blank ones."""
    return [line for line in text.splitlines() if not line.startswith(HEADER)]


def view(name: str, text: str) -> str:
    """The block VIEW shows of a transcript: its lines, in a text fence."""
    lines = VIEWS[name](transcript_lines(text))
    while lines and not lines[-1].strip():
        lines.pop()
    return "```text\n" + "\n".join(lines) + "\n```\n"


def rewritten(page: str, text: str) -> str:
    """The page with each sample block made from the transcript `text`."""
    return _BLOCK.sub(lambda m: m[1] + view(m[2], text) + m[4], page)


def selected(text: str) -> dict[str, tuple[float, float, str]]:
    """Each variant's selection in a run's printed summary: (score %, its standard error, hyperparameters shown)."""
    summary = text.split("=== best configuration per variant", 1)[1].split("\ntotal wall time", 1)[0]
    return {m[1]: (float(m[2]), float(m[3]), m[4]) for m in _SUMMARY.finditer(summary)}


def record(timeout_s: float = 900) -> str:
    """Run the quick start as a new user does (see the module's docstring); the transcript."""
    folder = Path(tempfile.mkdtemp(prefix="quickstart-"))
    try:
        (folder / SPACE).parent.mkdir(parents=True)
        shutil.copy(REPO / SPACE, folder / SPACE)
        hidden = ("RAY_ADDRESS", "MLFLOW_TRACKING_URI", "NO_COLOR")  # a private cluster, the default stores
        env = {k: v for k, v in os.environ.items() if k not in hidden}
        env |= {"PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}  # this clone's code; lines in the order written
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-c", CONSOLE, *COMMAND],
            cwd=folder,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout_s,
        )
        took = time.monotonic() - started
        if done.returncode != 0:
            raise SystemExit(f"the quick start exited with {done.returncode}:\n{done.stdout[-3000:]}")
        output = done.stdout
        for path in {str(folder), os.path.realpath(folder)}:
            output = output.replace(path, "$PWD")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    today = datetime.date.today().isoformat()
    header = f"{HEADER}raytune-fl {' '.join(COMMAND)}: recorded {today} by python -m tools.readme_samples --record"
    return f"{header}, {took:.0f} s end to end on {os.cpu_count()} cores\n{output}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--record", action="store_true", help=f"run the quick start into {TRANSCRIPT.name}")
    action.add_argument("--write", action="store_true", help="rewrite the sample blocks from the transcript")
    action.add_argument("--check", action="store_true", help="exit 1 when a sample block is stale")
    args = parser.parse_args(argv)
    if args.record:
        TRANSCRIPT.parent.mkdir(parents=True, exist_ok=True)
        TRANSCRIPT.write_text(record())
        print(f"wrote {TRANSCRIPT.relative_to(REPO)}; now: python -m tools.readme_samples --write")
        return 0
    text = TRANSCRIPT.read_text()
    stale = [page for page in PAGES if rewritten(page.read_text(), text) != page.read_text()]
    if args.check:
        for page in stale:
            print(f"{page.relative_to(REPO)}: a sample block is stale: python -m tools.readme_samples --write")
        return 1 if stale else 0
    for page in stale:
        page.write_text(rewritten(page.read_text(), text))
        print(f"rewrote {page.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
