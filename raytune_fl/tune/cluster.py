"""The command lines' use of Ray core: start or join a cluster, and ask what it has (no tasks, no actors)."""

from __future__ import annotations

import os
import socket
from typing import Any


def _probe(address: str, timeout_s: float = 10.0) -> None:
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except (OSError, ValueError) as error:
        raise ConnectionError(f"nothing answers at {address} ({error})") from None


def start_ray(address: str | None) -> None:
    """Join `address` ('auto', host:port, ray://...; default RAY_ADDRESS), else start a private local cluster."""
    import ray

    # checkpointing every round makes Tune snapshot its state often (it must, to keep resumes consistent); cheap
    # for our small states, so its warning about it is noise
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    if ray.is_initialized():  # e.g. inside a test session that already started a private cluster
        return
    address = address or os.environ.get("RAY_ADDRESS") or "local"
    if address not in ("auto", "local") and not address.startswith("ray://"):
        _probe(address)  # Ray itself retries an unreachable head for minutes
    kwargs: dict[str, Any] = {"address": address, "log_to_driver": True}
    if address == "local":
        kwargs["include_dashboard"] = False
    ray.init(**kwargs)


def cluster_view() -> tuple[str, dict[str, float], list[dict[str, float]]]:
    """The joined cluster: its GCS address, its total resources, and each live node's resources."""
    import ray

    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    return ray.get_runtime_context().gcs_address, ray.cluster_resources(), nodes
