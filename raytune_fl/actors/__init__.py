"""The Ray layer: client actors and the pool that drives them. The only place that calls ray.remote/wait."""

from raytune_fl.actors.pool import RayActorPool, ray_pool_factory

__all__ = ["RayActorPool", "ray_pool_factory"]
