"""Shared fixtures (helpers live in tests/support). Ray: one private local cluster per test session; never
`ray stop`. Everything under tests/system/ is the slow tier: marked here by its directory."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["tests.support.fixtures"]  # the stores several modules share

SYSTEM = Path(__file__).resolve().parent / "system"


@pytest.hookimpl(tryfirst=True)  # before -m 'not slow' deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow tier is a directory: a test is slow exactly when it lives under tests/system/."""
    for item in items:
        if SYSTEM in item.path.parents:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def ray_cluster():
    import ray

    if not ray.is_initialized():
        # num_gpus=0 on a GPU machine too: tests that ask for a GPU expect this cluster to have none
        ray.init(address="local", num_cpus=2, num_gpus=0, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()  # ends only the private cluster this session started
