"""Round rows compared for what was learned, not for when or where it ran."""

from __future__ import annotations

import dataclasses

from raytune_fl.engine.federation import CLIENT_LOG_KEY
from raytune_fl.types import WorkerPlace


def learning(row: dict) -> dict:
    """A round's metrics without timings and without where each client ran (Ray node, actor, GPU ids)."""
    kept = {k: v for k, v in row.items() if not k.endswith("_s")}
    where = {f.name for f in dataclasses.fields(WorkerPlace)}
    kept[CLIENT_LOG_KEY] = [{k: v for k, v in r.items() if k not in where} for r in row[CLIENT_LOG_KEY]]
    return kept
