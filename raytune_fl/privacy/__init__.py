"""Differential privacy's maths: the accountant (accountant.py), client-level DP-FedAvg's clip, noise and
fixed-denominator mean (central.py), and local DP-SGD's sampling plan (local.py). Numpy and scipy; no torch."""

from raytune_fl.privacy.accountant import GaussianSteps, epsilon, noise_for_epsilon
from raytune_fl.privacy.local import LocalPlan, local_plan

__all__ = ["GaussianSteps", "LocalPlan", "epsilon", "local_plan", "noise_for_epsilon"]  # not-a-metric: a function
