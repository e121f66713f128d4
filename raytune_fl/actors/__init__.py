"""The Ray layer: client actors and the pool that drives them. The only place that calls ray.remote/wait.

`RayActorPool` and `ray_pool_factory` load on first use: a trial process imports actors/client.py (light) to start
its actors before it imports torch (actors/client.py's start_early)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from raytune_fl.actors.pool import RayActorPool, ray_pool_factory

__all__ = ["RayActorPool", "ray_pool_factory"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from raytune_fl.actors import pool

        return getattr(pool, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
