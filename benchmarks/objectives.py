"""The cost of several objectives: search_spaces/fairness.yaml (two objectives, FIFO) against the single-objective
quick start (ASHA), each through the real `scripts/tune.py`, run alternately `--reps` times so both see the same
machine; prints each run's wall time, the ratio per repetition and the Pareto front sizes the summary reports.

    python -m benchmarks.objectives --reps 2
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SPACES = {"single (quickstart.yaml)": "quickstart", "two objectives (fairness.yaml)": "fairness"}


def run_study(space: str, folder: Path) -> tuple[float, dict[str, int]]:
    """Wall seconds of one `tune.py` run of `space` in `folder`, and the front size per variant it printed."""
    command = [
        sys.executable,
        str(REPO / "scripts" / "tune.py"),
        "--space",
        str(REPO / "search_spaces" / f"{space}.yaml"),
    ]
    command += ["--storage", str(folder / "ray"), "--mlflow-uri", f"sqlite:///{folder / 'mlflow.db'}"]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{space}: tune.py exited {done.returncode}\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    fronts = {m[1]: int(m[2]) for m in re.finditer(r"^\s*(\S+): (\d+) trials? on the front", done.stdout, re.M)}
    return seconds, fronts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2, help="repetitions, the two studies alternating in each")
    args = parser.parse_args(argv)
    ratios = []
    for rep in range(args.reps):
        times = {}
        order = list(SPACES.items()) if rep % 2 == 0 else list(reversed(SPACES.items()))
        for label, space in order:
            with tempfile.TemporaryDirectory(prefix=f"bench-objectives-{space}-") as tmp:
                times[space], fronts = run_study(space, Path(tmp))
            shown = f"  fronts: {fronts}" if fronts else ""
            print(f"rep {rep + 1}: {label:<32} {times[space]:7.1f} s{shown}", flush=True)
        ratios.append(times["fairness"] / times["quickstart"])
        print(f"rep {rep + 1}: two objectives / single = {ratios[-1]:.2f}x", flush=True)
    print(f"ratio over {args.reps} repetitions: {min(ratios):.2f}x to {max(ratios):.2f}x (target: <= 2x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
