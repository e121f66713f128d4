"""Server aggregators: pure functions of (global weights, client updates). No torch, no Ray."""

from raytune_fl.aggregators.fedavg import fedavg, weighted_mean_delta

__all__ = ["fedavg", "weighted_mean_delta"]
