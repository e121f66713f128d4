"""What one trial reserves: a driver bundle plus one bundle per client actor."""

from __future__ import annotations

from typing import TYPE_CHECKING

from raytune_fl.config import ResourcesConfig
from raytune_fl.devices import gpu_shares

if TYPE_CHECKING:  # Ray Tune (seconds to import) only where a placement group is made: the checks run before it
    from ray import tune


def trial_bundles(resources: ResourcesConfig) -> list[dict[str, float]]:
    """Bundle 0 is the trial's own process (the round driver; the clients too with actors: 0), then one per actor."""
    shares = gpu_shares(resources)
    if resources.actors == 0:  # clients train inside the trial's own process, on its bundle's GPU share
        return [_bundle(max(resources.driver_cpus, resources.cpus_per_actor), shares.driver)]
    # too few bundles would leave actor creation waiting forever
    actors = [_bundle(resources.cpus_per_actor, shares.actor) for _ in range(resources.actors)]
    return [_bundle(resources.driver_cpus, shares.driver), *actors]


def _bundle(cpus: float, gpus: float) -> dict[str, float]:
    return {"CPU": cpus, "GPU": gpus} if gpus else {"CPU": cpus}  # no GPU key without a share (as Ray shows them)


def placement_group_factory(resources: ResourcesConfig) -> tune.PlacementGroupFactory:
    from ray import tune

    return tune.PlacementGroupFactory(trial_bundles(resources))


def check_fits(resources: ResourcesConfig, cluster: dict[str, float]) -> None:
    """Fail fast, instead of a trial pending forever, when one trial cannot fit on the cluster."""
    bundles = trial_bundles(resources)
    if resources.device == "cuda" and cluster.get("GPU", 0.0) == 0:
        raise ValueError("base.resources.device: 'cuda' but the Ray cluster has 0 GPU; use device: auto or cpu")
    for kind, field, driver in (("CPU", "cpus_per_actor", "driver_cpus"), ("GPU", "gpus_per_actor", "driver_gpus")):
        need = sum(b.get(kind, 0.0) for b in bundles)
        have = cluster.get(kind, 0.0)
        if need > have + 1e-9:
            what = f"{resources.actors} actors x {field}, plus the driver's {driver}"
            if resources.actors == 0:
                what = f"actors: 0, the trial's own bundle: {field}"
            raise ValueError(
                f"base.resources: one trial needs {need:g} {kind} ({what} = {bundles[0].get(kind, 0.0):g}) but the "
                f"Ray cluster has {have:g}; "
                + (
                    f"lower resources.actors or resources.{field}, or set resources.{driver}"
                    if resources.actors
                    else f"lower resources.{field}"
                )
            )


def check_nodes_fit(resources: ResourcesConfig, nodes: list[dict[str, float]]) -> None:
    """Fail fast when one trial fits the cluster's totals but no arrangement of its bundles on the nodes (e.g. 4
    quarter-GPU actors of 1 CPU each where the only GPU node has 2 CPUs): Ray would leave it pending forever.

    Exact for our trials: bundles may spread over nodes, the actor bundles are identical, so it is enough to try
    the driver bundle on each node and count how many actor bundles fit in what every node has left."""
    driver, *actors = trial_bundles(resources)
    if not nodes:
        return
    best = 0
    for host in range(len(nodes)):
        if not _fits(driver, nodes[host]):
            continue
        left = [{k: v - (driver.get(k, 0.0) if i == host else 0.0) for k, v in n.items()} for i, n in enumerate(nodes)]
        best = max(best, sum(_how_many(actors[0], n) for n in left) if actors else len(actors))
        if best >= len(actors):
            return
    shown = ", ".join(f"{n.get('CPU', 0):g} CPU/{n.get('GPU', 0):g} GPU" for n in nodes)
    raise ValueError(
        f"base.resources: one trial's bundles (driver {driver} + {len(actors)} x {actors[0] if actors else {}}) fit "
        f"the cluster's totals but not its nodes ({shown}): at most {best} actors fit beside the driver; lower "
        "resources.actors or resources.cpus_per_actor, or give the GPU nodes more CPUs"
    )


def _fits(bundle: dict[str, float], node: dict[str, float]) -> bool:
    return all(node.get(k, 0.0) + 1e-9 >= v for k, v in bundle.items())


def _how_many(bundle: dict[str, float], node: dict[str, float]) -> int:
    counts = [int((node.get(k, 0.0) + 1e-9) // v) for k, v in bundle.items() if v > 0]
    return min(counts) if counts else 1_000_000  # a bundle of nothing fits anywhere
