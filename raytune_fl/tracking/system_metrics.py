"""System metrics of a trial, MLflow's way: opted in with MLflow's own switch, sampled in the trial's process with
MLflow's monitors, logged by the driver on the trial's run under MLflow's `system/` names.

Why not MLflow's `SystemMetricsMonitor` on the trial's run: it measures the process it runs in, and a trial's run is
written by the driver (tracking/trials.py), while the trial trains in a Ray worker, maybe on another node. So the
trial's process samples (`SystemSampler`, once per round, as it reports) and the samples travel with the round's
report (engine/report.py's `RoundReport.system`) to the driver, which logs them at step = round.

The switch is MLflow's: `MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING=true` or `mlflow.enable_system_metrics_logging()` in
the driver (the commands' `--system-metrics` sets it). The driver reads it when it builds a trainable and hands it
to the trials (Ray does not pass the driver's environment to a cluster started before it was set).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from typing import Any

from raytune_fl.metrics import SYSTEM_PREFIX

_log = logging.getLogger(__name__)


def system_metrics_on() -> bool:
    """Whether this process asked for system metrics (MLflow's MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING)."""
    from mlflow.environment_variables import MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING

    return bool(MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING.get())


def enable_system_metrics() -> None:
    """MLflow's switch on, for this process and the processes it starts (it sets the environment variable)."""
    import mlflow

    mlflow.enable_system_metrics_logging()


class SystemMetricsFlag(argparse.Action):
    """`--system-metrics`: turns MLflow's switch on as the command line is read, before anything starts."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=False, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, *_: Any) -> None:
        enable_system_metrics()
        setattr(namespace, self.dest, True)


SYSTEM_METRICS_HELP = (
    "log each trial's system metrics on its MLflow run, once per round: CPU utilisation and memory of the node the "
    "trial's process runs on, and GPU utilisation and memory where nvidia-ml-py finds a GPU (MLflow's "
    "system/... names); the same as MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING=true"
)


def _gpu_monitor() -> Any | None:
    """MLflow's NVIDIA monitor where nvidia-ml-py imports and finds a GPU, else its AMD one, else None (as MLflow's
    own SystemMetricsMonitor chooses)."""
    from mlflow.system_metrics.metrics.gpu_monitor import GPUMonitor
    from mlflow.system_metrics.metrics.rocm_monitor import ROCMMonitor

    for monitor in (GPUMonitor, ROCMMonitor):
        try:
            return monitor()
        except Exception as error:  # not installed, no driver, no device: this process has no GPU metrics
            _log.debug("no %s: %s", monitor.__name__, error)
    return None


class SystemSampler:
    """MLflow's CPU monitor, and its GPU monitor where there is a GPU, sampled in this process when asked.

    CPU utilisation is the node's, averaged since the previous sample (psutil.cpu_percent's window: here the
    round, as the trial samples once per report; the first round's window starts when the sampler is made). Memory,
    and the GPU readings, are the node's at the moment of the sample. GPUs are every GPU NVML sees on the node
    (gpu_0 is NVML's device 0, not necessarily the trial's).
    """

    def __init__(self) -> None:
        import psutil
        from mlflow.system_metrics.metrics.cpu_monitor import CPUMonitor

        self.monitors: list[Any] = [CPUMonitor()]
        gpu = _gpu_monitor()
        if gpu is not None:
            self.monitors.append(gpu)
        psutil.cpu_percent()  # opens the first window: the first sample covers the time from here

    def sample(self) -> dict[str, float]:
        """One reading of every monitor, under MLflow's names (system/cpu_utilization_percentage, ...)."""
        values: dict[str, float] = {}
        for monitor in self.monitors:
            monitor.collect_metrics()
            values.update(monitor.aggregate_metrics())  # the mean of one sample: the sample, rounded as MLflow does
            monitor.clear_metrics()
        return {SYSTEM_PREFIX + name: float(value) for name, value in values.items()}
