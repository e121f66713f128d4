"""Shared fixtures. Ray: one private local cluster per test session; never `ray stop`."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def ray_cluster():
    import ray

    if not ray.is_initialized():
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()  # ends only the private cluster this session started


def command_lines() -> list[str]:
    """Every live process's command line (from /proc: no psutil needed)."""
    lines = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                lines.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
            except OSError:  # exited meanwhile
                continue
    return lines


def tiny_space(name: str = "tiny", **base_overrides) -> dict:
    """A search space small enough to run end to end in seconds: digits, 3 clients, 3 rounds."""
    base = {
        "dataset": "digits",
        "partition": {"kind": "dirichlet", "alpha": 0.5, "clients": 3, "min_size": 20, "seed": 0},
        "rounds": 3,
        "batch_size": 32,
        "resources": {"actors": 2, "cpus_per_actor": 1},
        **base_overrides,
    }
    return {
        "name": name,
        "base": base,
        "variants": {
            "full": {
                "method": "univarfl",
                "search": {"mu": {"loguniform": [0.01, 1.0]}, "lambda": {"uniform": [0.5, 3.0]}},
            },
            "fedavg": {"method": "fedavg"},
        },
        "tune": {"num_samples": 3, "max_concurrent": 1, "scheduler": {"asha": {"grace_period": 1}}, "seed": 0},
    }


DELETE = object()  # as a value in changed_space(): remove that key


def changed_space(*changes: tuple[str, object]) -> dict:
    """tiny_space() with dotted-path changes applied (missing sections are created; DELETE removes a key)."""
    data = tiny_space()
    for path, value in changes:
        node = data
        *parents, leaf = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        if value is DELETE:
            del node[leaf]
        else:
            node[leaf] = value
    return data
