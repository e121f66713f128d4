"""FedAvg (McMahan et al. 2017): cross-entropy only, sample-weighted mean of client models."""

from raytune_fl.aggregators import fedavg
from raytune_fl.methods.base import METHODS, Method, MethodSpec

METHODS.register("fedavg")(
    MethodSpec("fedavg", {}, lambda params, num_classes: Method("fedavg", (), fedavg), "cross-entropy only")
)
