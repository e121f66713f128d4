"""FedAvg (McMahan et al. 2017): cross-entropy only, sample-weighted mean of client models."""

from raytune_fl.aggregators import fedavg
from raytune_fl.methods.base import Method, MethodSpec, Stateless, register

register(
    MethodSpec("fedavg", {}, lambda params, context: Method("fedavg", (), Stateless(fedavg)), "cross-entropy only")
)
