"""What one trial reserves: a driver bundle plus one bundle per client actor."""

from __future__ import annotations

from ray import tune

from raytune_fl.config import ResourcesConfig


def trial_bundles(resources: ResourcesConfig) -> list[dict[str, float]]:
    if resources.actors == 0:  # clients train inside the trial's own process
        return [{"CPU": max(resources.driver_cpus, resources.cpus_per_actor)}]
    actor = {"CPU": resources.cpus_per_actor}
    if resources.gpus_per_actor:
        actor["GPU"] = resources.gpus_per_actor
    # bundle 0 is the trial's driver; too few bundles would leave actor creation waiting forever
    return [{"CPU": resources.driver_cpus}] + [dict(actor) for _ in range(resources.actors)]


def placement_group_factory(resources: ResourcesConfig) -> tune.PlacementGroupFactory:
    return tune.PlacementGroupFactory(trial_bundles(resources))


def check_fits(resources: ResourcesConfig, cluster: dict[str, float]) -> None:
    """Fail fast, instead of a trial pending forever, when one trial cannot fit on the cluster."""
    bundles = trial_bundles(resources)
    for kind, field in (("CPU", "cpus_per_actor"), ("GPU", "gpus_per_actor")):
        need = sum(b.get(kind, 0.0) for b in bundles)
        have = cluster.get(kind, 0.0)
        if need > have + 1e-9:
            raise ValueError(
                f"base.resources: one trial needs {need:g} {kind} "
                f"({resources.actors} actors x {field}, plus the driver) but the Ray cluster has {have:g}; "
                f"lower resources.actors or resources.{field}"
            )
    if resources.device == "cuda" and cluster.get("GPU", 0.0) == 0:
        raise ValueError("base.resources.device: 'cuda' but the Ray cluster has 0 GPU; use device: auto or cpu")
