"""Shared fixtures (helpers live in tests/support). Ray: one private local cluster per test session; never
`ray stop`. The tiers are marked here, by the rules of tests/support/tiers.py: everything under tests/system/ is
slow; a test that needs no Ray, server or training is unit (`python -m pytest -q -m unit`, run under its guards)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.tiers import SYSTEM, UnitGuard, is_unit, skipped_in_unit_run

pytest_plugins = ["tests.support.fixtures"]  # the stores several modules share


@pytest.hookimpl(tryfirst=True)  # before -m 'not slow' (or -m unit) deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow tier is a directory; the unit tier is the rule of tests/support/tiers.py. No test marks itself."""
    for item in items:
        if SYSTEM in item.path.parents:
            item.add_marker(pytest.mark.slow)
        elif is_unit(item.nodeid, getattr(item, "fixturenames", [])):
            item.add_marker(pytest.mark.unit)


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("markexpr") == "unit":
        config.pluginmanager.register(UnitRun(), "unit-run")


class UnitRun:
    """`-m unit`: the modules outside the tier are not imported, and each test runs under the tier's guards."""

    def __init__(self) -> None:
        self.guard = UnitGuard()

    def pytest_ignore_collect(self, collection_path: Path) -> bool | None:
        return True if collection_path.is_relative_to(SYSTEM.parent) and skipped_in_unit_run(collection_path) else None

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        import sys

        if "ray" in sys.modules:
            raise pytest.UsageError(
                "collecting the unit tier imported ray: a test module outside tests/support/tiers.py NOT_UNIT "
                "imports it (or a raytune_fl module that does) at module level; declare it there with the reason"
            )

    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        self.guard.before()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]):
        outcome = yield
        report = outcome.get_result()
        if report.when == "call" and report.passed:
            broken = self.guard.broken_rule()
            if broken:
                report.outcome, report.longrepr = "failed", broken


@pytest.fixture(scope="session")
def ray_cluster():
    import ray

    if not ray.is_initialized():
        # num_gpus=0 on a GPU machine too: tests that ask for a GPU expect this cluster to have none
        ray.init(address="local", num_cpus=2, num_gpus=0, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()  # ends only the private cluster this session started
